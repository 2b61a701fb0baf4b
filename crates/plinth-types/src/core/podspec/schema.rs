//! The shapes of a pod's spec and status (and of a pod template), as the built-in schemas\n//! decoding and unknown-field detection use.

use plinth_registry::schema::{Schema, array, obj, object_meta, strings};

fn quantities() -> Schema {
    Schema::Map(Box::new(Schema::Quantity))
}

fn key_selector() -> Schema {
    obj(vec![
        ("name", Schema::String),
        ("key", Schema::String),
        ("optional", Schema::Bool),
    ])
}

fn field_ref() -> Schema {
    obj(vec![
        ("apiVersion", Schema::String),
        ("fieldPath", Schema::String),
    ])
}

fn resource_field_ref() -> Schema {
    obj(vec![
        ("containerName", Schema::String),
        ("resource", Schema::String),
        ("divisor", Schema::Quantity),
    ])
}

fn env_var() -> Schema {
    obj(vec![
        ("name", Schema::String),
        ("value", Schema::String),
        (
            "valueFrom",
            obj(vec![
                ("fieldRef", field_ref()),
                ("resourceFieldRef", resource_field_ref()),
                ("configMapKeyRef", key_selector()),
                ("secretKeyRef", key_selector()),
            ]),
        ),
    ])
}

fn env_from() -> Schema {
    let source = || obj(vec![("name", Schema::String), ("optional", Schema::Bool)]);
    obj(vec![
        ("prefix", Schema::String),
        ("configMapRef", source()),
        ("secretRef", source()),
    ])
}

fn handler(with_sleep: bool) -> Schema {
    let mut fields = vec![
        ("exec", obj(vec![("command", array(Schema::String))])),
        (
            "httpGet",
            obj(vec![
                ("path", Schema::String),
                ("port", Schema::IntOrString),
                ("host", Schema::String),
                ("scheme", Schema::String),
                (
                    "httpHeaders",
                    array(obj(vec![
                        ("name", Schema::String),
                        ("value", Schema::String),
                    ])),
                ),
            ]),
        ),
        (
            "tcpSocket",
            obj(vec![
                ("port", Schema::IntOrString),
                ("host", Schema::String),
            ]),
        ),
    ];
    if with_sleep {
        fields.push(("sleep", obj(vec![("seconds", Schema::Int)])));
    } else {
        fields.push((
            "grpc",
            obj(vec![("port", Schema::Int), ("service", Schema::String)]),
        ));
    }
    obj(fields)
}

fn probe() -> Schema {
    let Schema::Object(mut fields) = handler(false) else {
        return Schema::Any;
    };
    fields.extend([
        ("initialDelaySeconds", Schema::Int),
        ("timeoutSeconds", Schema::Int),
        ("periodSeconds", Schema::Int),
        ("successThreshold", Schema::Int),
        ("failureThreshold", Schema::Int),
        ("terminationGracePeriodSeconds", Schema::Int),
    ]);
    obj(fields)
}

fn container() -> Schema {
    obj(vec![
        ("name", Schema::String),
        ("image", Schema::String),
        ("command", array(Schema::String)),
        ("args", array(Schema::String)),
        ("workingDir", Schema::String),
        (
            "ports",
            array(obj(vec![
                ("name", Schema::String),
                ("hostPort", Schema::Int),
                ("containerPort", Schema::Int),
                ("protocol", Schema::String),
                ("hostIP", Schema::String),
            ])),
        ),
        ("envFrom", array(env_from())),
        ("env", array(env_var())),
        (
            "resources",
            obj(vec![
                ("limits", quantities()),
                ("requests", quantities()),
                ("claims", array(Schema::Any)),
            ]),
        ),
        ("resizePolicy", array(Schema::Any)),
        ("restartPolicy", Schema::String),
        (
            "volumeMounts",
            array(obj(vec![
                ("name", Schema::String),
                ("readOnly", Schema::Bool),
                ("recursiveReadOnly", Schema::String),
                ("mountPath", Schema::String),
                ("subPath", Schema::String),
                ("mountPropagation", Schema::String),
                ("subPathExpr", Schema::String),
            ])),
        ),
        (
            "volumeDevices",
            array(obj(vec![
                ("name", Schema::String),
                ("devicePath", Schema::String),
            ])),
        ),
        ("livenessProbe", probe()),
        ("readinessProbe", probe()),
        ("startupProbe", probe()),
        (
            "lifecycle",
            obj(vec![
                ("postStart", handler(true)),
                ("preStop", handler(true)),
                ("stopSignal", Schema::String),
            ]),
        ),
        ("terminationMessagePath", Schema::String),
        ("terminationMessagePolicy", Schema::String),
        ("imagePullPolicy", Schema::String),
        ("securityContext", Schema::Any),
        ("stdin", Schema::Bool),
        ("stdinOnce", Schema::Bool),
        ("tty", Schema::Bool),
        ("targetContainerName", Schema::String),
    ])
}

fn key_to_paths() -> Schema {
    array(obj(vec![
        ("key", Schema::String),
        ("path", Schema::String),
        ("mode", Schema::Int),
    ]))
}

fn downward_items() -> Schema {
    array(obj(vec![
        ("path", Schema::String),
        ("fieldRef", field_ref()),
        ("resourceFieldRef", resource_field_ref()),
        ("mode", Schema::Int),
    ]))
}

fn config_map_source() -> Vec<(&'static str, Schema)> {
    vec![
        ("name", Schema::String),
        ("items", key_to_paths()),
        ("optional", Schema::Bool),
    ]
}

fn volume() -> Schema {
    let mut config_map = config_map_source();
    config_map.push(("defaultMode", Schema::Int));
    let mut fields = vec![
        ("name", Schema::String),
        (
            "hostPath",
            obj(vec![("path", Schema::String), ("type", Schema::String)]),
        ),
        (
            "emptyDir",
            obj(vec![
                ("medium", Schema::String),
                ("sizeLimit", Schema::Quantity),
            ]),
        ),
        (
            "secret",
            obj(vec![
                ("secretName", Schema::String),
                ("items", key_to_paths()),
                ("defaultMode", Schema::Int),
                ("optional", Schema::Bool),
            ]),
        ),
        ("configMap", obj(config_map)),
        (
            "persistentVolumeClaim",
            obj(vec![
                ("claimName", Schema::String),
                ("readOnly", Schema::Bool),
            ]),
        ),
        (
            "downwardAPI",
            obj(vec![
                ("items", downward_items()),
                ("defaultMode", Schema::Int),
            ]),
        ),
        (
            "projected",
            obj(vec![
                (
                    "sources",
                    array(obj(vec![
                        ("secret", obj(config_map_source())),
                        ("configMap", obj(config_map_source())),
                        ("downwardAPI", obj(vec![("items", downward_items())])),
                        (
                            "serviceAccountToken",
                            obj(vec![
                                ("audience", Schema::String),
                                ("expirationSeconds", Schema::Int),
                                ("path", Schema::String),
                            ]),
                        ),
                        ("clusterTrustBundle", Schema::Any),
                    ])),
                ),
                ("defaultMode", Schema::Int),
            ]),
        ),
    ];
    // The sources no node agent here provides are still part of the type.
    for other in [
        "gcePersistentDisk",
        "awsElasticBlockStore",
        "gitRepo",
        "nfs",
        "iscsi",
        "glusterfs",
        "rbd",
        "flexVolume",
        "cinder",
        "cephfs",
        "flocker",
        "fc",
        "azureFile",
        "vsphereVolume",
        "quobyte",
        "azureDisk",
        "photonPersistentDisk",
        "portworxVolume",
        "scaleIO",
        "storageos",
        "csi",
        "ephemeral",
        "image",
    ] {
        fields.push((other, Schema::Any));
    }
    obj(fields)
}

fn toleration() -> Schema {
    obj(vec![
        ("key", Schema::String),
        ("operator", Schema::String),
        ("value", Schema::String),
        ("effect", Schema::String),
        ("tolerationSeconds", Schema::Int),
    ])
}

/// `corev1.PodSpec`.
pub fn pod_spec() -> Schema {
    obj(vec![
        ("volumes", array(volume())),
        ("initContainers", array(container())),
        ("containers", array(container())),
        ("ephemeralContainers", array(container())),
        ("restartPolicy", Schema::String),
        ("terminationGracePeriodSeconds", Schema::Int),
        ("activeDeadlineSeconds", Schema::Int),
        ("dnsPolicy", Schema::String),
        ("nodeSelector", strings()),
        ("serviceAccountName", Schema::String),
        ("serviceAccount", Schema::String),
        ("automountServiceAccountToken", Schema::Bool),
        ("nodeName", Schema::String),
        ("hostNetwork", Schema::Bool),
        ("hostPID", Schema::Bool),
        ("hostIPC", Schema::Bool),
        ("shareProcessNamespace", Schema::Bool),
        ("securityContext", Schema::Any),
        (
            "imagePullSecrets",
            array(obj(vec![("name", Schema::String)])),
        ),
        ("hostname", Schema::String),
        ("subdomain", Schema::String),
        ("affinity", Schema::Any),
        ("schedulerName", Schema::String),
        ("tolerations", array(toleration())),
        ("hostAliases", array(Schema::Any)),
        ("priorityClassName", Schema::String),
        ("priority", Schema::Int),
        ("dnsConfig", Schema::Any),
        (
            "readinessGates",
            array(obj(vec![("conditionType", Schema::String)])),
        ),
        ("runtimeClassName", Schema::String),
        ("enableServiceLinks", Schema::Bool),
        ("preemptionPolicy", Schema::String),
        ("overhead", quantities()),
        ("topologySpreadConstraints", array(Schema::Any)),
        ("setHostnameAsFQDN", Schema::Bool),
        ("os", obj(vec![("name", Schema::String)])),
        ("hostUsers", Schema::Bool),
        (
            "schedulingGates",
            array(obj(vec![("name", Schema::String)])),
        ),
        ("resourceClaims", array(Schema::Any)),
        ("resources", Schema::Any),
    ])
}

/// `corev1.PodTemplateSpec`.
pub fn pod_template_spec() -> Schema {
    obj(vec![("metadata", object_meta()), ("spec", pod_spec())])
}

fn container_state() -> Schema {
    obj(vec![
        (
            "waiting",
            obj(vec![
                ("reason", Schema::String),
                ("message", Schema::String),
            ]),
        ),
        ("running", obj(vec![("startedAt", Schema::String)])),
        (
            "terminated",
            obj(vec![
                ("exitCode", Schema::Int),
                ("signal", Schema::Int),
                ("reason", Schema::String),
                ("message", Schema::String),
                ("startedAt", Schema::String),
                ("finishedAt", Schema::String),
                ("containerID", Schema::String),
            ]),
        ),
    ])
}

fn container_status() -> Schema {
    obj(vec![
        ("name", Schema::String),
        ("state", container_state()),
        ("lastState", container_state()),
        ("ready", Schema::Bool),
        ("restartCount", Schema::Int),
        ("image", Schema::String),
        ("imageID", Schema::String),
        ("containerID", Schema::String),
        ("started", Schema::Bool),
        ("allocatedResources", quantities()),
        ("resources", Schema::Any),
        ("volumeMounts", array(Schema::Any)),
        ("user", Schema::Any),
        ("allocatedResourcesStatus", array(Schema::Any)),
        ("stopSignal", Schema::String),
    ])
}

/// `corev1.PodStatus`.
pub fn pod_status() -> Schema {
    obj(vec![
        ("observedGeneration", Schema::Int),
        ("phase", Schema::String),
        (
            "conditions",
            array(obj(vec![
                ("type", Schema::String),
                ("observedGeneration", Schema::Int),
                ("status", Schema::String),
                ("lastProbeTime", Schema::String),
                ("lastTransitionTime", Schema::String),
                ("reason", Schema::String),
                ("message", Schema::String),
            ])),
        ),
        ("message", Schema::String),
        ("reason", Schema::String),
        ("nominatedNodeName", Schema::String),
        ("hostIP", Schema::String),
        ("hostIPs", array(obj(vec![("ip", Schema::String)]))),
        ("podIP", Schema::String),
        ("podIPs", array(obj(vec![("ip", Schema::String)]))),
        ("startTime", Schema::String),
        ("initContainerStatuses", array(container_status())),
        ("containerStatuses", array(container_status())),
        ("qosClass", Schema::String),
        ("ephemeralContainerStatuses", array(container_status())),
        ("resize", Schema::String),
        ("resourceClaimStatuses", array(Schema::Any)),
    ])
}

// ---------------------------------------------------------------------------------------
// Defaults (upstream's `SetDefaults_PodSpec`, `SetDefaults_Container`, `SetDefaults_Probe`, …)
