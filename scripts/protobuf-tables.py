#!/usr/bin/env python3
"""Writes crates/plinth-protobuf/src/generated.rs: the protobuf field tables of the
built-in workload types and everything they contain, read from upstream's generated.proto
files (a checkout of github.com/kubernetes/api, given as the only argument). Field numbers
are data; the tables are what protobuf/encode.rs and protobuf/decode.rs walk.

    scripts/protobuf-tables.py ~/src/kubernetes-api v0.33.7
    scripts/protobuf-tables.py "$(go env GOMODCACHE)/k8s.io/api@v0.33.13"

With a revision, the files are read from that commit or tag of the checkout's history; a
directory that is not a git checkout (the Go module `k8s.io/api`, from the module proxy:
`go mod download -json k8s.io/api@v0.33.13`) is read as it is.
"""
import re
import subprocess
import sys
from pathlib import Path

PACKAGES = ["core/v1", "apps/v1", "batch/v1", "autoscaling/v1", "autoscaling/v2", "policy/v1",
            "networking/v1", "scheduling/v1", "node/v1", "storage/v1", "admissionregistration/v1",
            "discovery/v1"]
# The top-level kinds served with a protobuf form, by (apiVersion, package, message).
ROOTS = [
    ("v1", "core/v1", "Pod"),
    ("v1", "core/v1", "PodTemplate"),
    ("v1", "core/v1", "Service"),
    ("v1", "core/v1", "Endpoints"),
    ("v1", "core/v1", "Node"),
    ("v1", "core/v1", "PersistentVolume"),
    ("v1", "core/v1", "PersistentVolumeClaim"),
    ("v1", "core/v1", "LimitRange"),
    ("v1", "core/v1", "ResourceQuota"),
    ("v1", "core/v1", "Binding"),
    ("v1", "core/v1", "ReplicationController"),
    ("v1", "core/v1", "ComponentStatus"),
    ("apps/v1", "apps/v1", "Deployment"),
    ("apps/v1", "apps/v1", "ReplicaSet"),
    ("apps/v1", "apps/v1", "StatefulSet"),
    ("apps/v1", "apps/v1", "DaemonSet"),
    ("apps/v1", "apps/v1", "ControllerRevision"),
    ("batch/v1", "batch/v1", "Job"),
    ("batch/v1", "batch/v1", "CronJob"),
    ("autoscaling/v1", "autoscaling/v1", "HorizontalPodAutoscaler"),
    ("autoscaling/v1", "autoscaling/v1", "Scale"),
    ("autoscaling/v2", "autoscaling/v2", "HorizontalPodAutoscaler"),
    ("policy/v1", "policy/v1", "PodDisruptionBudget"),
    ("policy/v1", "policy/v1", "Eviction"),
    ("networking.k8s.io/v1", "networking/v1", "Ingress"),
    ("networking.k8s.io/v1", "networking/v1", "IngressClass"),
    ("networking.k8s.io/v1", "networking/v1", "NetworkPolicy"),
    ("scheduling.k8s.io/v1", "scheduling/v1", "PriorityClass"),
    ("node.k8s.io/v1", "node/v1", "RuntimeClass"),
    ("storage.k8s.io/v1", "storage/v1", "StorageClass"),
    ("storage.k8s.io/v1", "storage/v1", "CSIDriver"),
    ("storage.k8s.io/v1", "storage/v1", "CSINode"),
    ("storage.k8s.io/v1", "storage/v1", "CSIStorageCapacity"),
    ("storage.k8s.io/v1", "storage/v1", "VolumeAttachment"),
    ("admissionregistration.k8s.io/v1", "admissionregistration/v1", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1", "admissionregistration/v1", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1", "admissionregistration/v1", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io/v1", "admissionregistration/v1", "ValidatingAdmissionPolicyBinding"),
    ("discovery.k8s.io/v1", "discovery/v1", "EndpointSlice"),
]
# Embedded Go structs (`json:",inline"`): a nested message in protobuf, the parent's own
# fields in JSON. In these packages: a `LocalObjectReference` in the key selectors and
# sources, a volume's source, a persistent volume's source, an ephemeral container's
# common part, a probe's handler, an Ingress rule's value, an admission rule and a named
# admission rule's operations.
EMBEDDED = {"localObjectReference", "volumeSource", "persistentVolumeSource", "ephemeralContainerCommon",
            "ingressRuleValue", "rule", "ruleWithOperations"}
INLINE = {("core/v1", "Probe", "handler")}


def embedded(pkg, message, field, type_name):
    short = type_name.rsplit(".", 1)[-1]
    named = field in EMBEDDED and field == short[:1].lower() + short[1:]
    return (pkg, message, field) in INLINE or named


# apimachinery's types: a shape, or a table of types.rs.
EXTERNAL = {
    "k8s.io.apimachinery.pkg.api.resource.Quantity": "Quantity",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": "IntOrString",
    "k8s.io.apimachinery.pkg.apis.meta.v1.Time": "Time",
    "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime": "MicroTime",
    "k8s.io.apimachinery.pkg.runtime.RawExtension": "RawJson",
    "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta": "Message(OBJECT_META)",
    "k8s.io.apimachinery.pkg.apis.meta.v1.ListMeta": "Message(LIST_META)",
    "k8s.io.apimachinery.pkg.apis.meta.v1.LabelSelector": "Message(LABEL_SELECTOR)",
    "k8s.io.apimachinery.pkg.apis.meta.v1.Condition": "Message(CONDITION)",
    "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions": "Message(DELETE_OPTIONS)",
    "k8s.io.apimachinery.pkg.apis.meta.v1.OwnerReference": "Message(OWNER_REFERENCE)",
}
SCALARS = {"string": "Str", "int32": "I32", "int64": "I64", "bool": "Bool",
           "double": "Double", "bytes": "Bytes"}
FIELD = re.compile(r"^\s*(optional|repeated)\s+([\w.]+)\s+(\w+)\s*=\s*(\d+);")
MAP = re.compile(r"^\s*map<\s*string\s*,\s*([\w.]+)\s*>\s+(\w+)\s*=\s*(\d+);")


def parse(text):
    messages, current = {}, None
    for line in text.splitlines():
        if current is None:
            m = re.match(r"^message (\w+) \{", line)
            if m:
                current = m.group(1)
                messages[current] = []
            continue
        if line.startswith("}"):
            current = None
            continue
        m = FIELD.match(line)
        if m:
            messages[current].append((m.group(3), int(m.group(4)), m.group(1) == "repeated", m.group(2), False))
            continue
        m = MAP.match(line)
        if m:
            messages[current].append((m.group(2), int(m.group(3)), False, m.group(1), True))
    return messages


GO_FIELD = re.compile(r'^\s+\w*\s*(\*?)[\w.\[\]]*\s*`json:"([^"]*)".*protobuf:"[^"]*name=(\w+)')


def go_fields(text):
    """(struct, protobuf name) → (pointer, omitempty, JSON name), from a types.go."""
    fields, current = {}, None
    for line in text.splitlines():
        m = re.match(r"^type (\w+) struct \{", line)
        if m:
            current = m.group(1)
            continue
        if line.startswith("}"):
            current = None
            continue
        m = GO_FIELD.match(line)
        if current and m:
            fields[(current, m.group(3))] = (m.group(1) == "*", "omitempty" in m.group(2),
                                             m.group(2).split(",", 1)[0])
    return fields


def main():
    root = Path(sys.argv[1])
    rev = sys.argv[2] if len(sys.argv) > 2 else None
    protos, gotypes = {}, {}
    checkout = (root / ".git").exists()

    def read(pkg, name):
        if not checkout:
            return (root / pkg / name).read_text()
        return subprocess.run(["git", "-C", str(root), "show", f"{rev or 'HEAD'}:{pkg}/{name}"],
                              capture_output=True, text=True, check=True).stdout

    label = rev or (root.name.split("@", 1)[1] if "@" in root.name else "a checkout")
    for pkg in PACKAGES:
        protos[pkg] = parse(read(pkg, "generated.proto"))
        gotypes[pkg] = go_fields(read(pkg, "types.go"))

    def resolve(pkg, type_name):
        type_name = type_name.lstrip(".")
        if type_name in SCALARS:
            return ("scalar", SCALARS[type_name])
        if type_name in EXTERNAL:
            return ("scalar", EXTERNAL[type_name])
        m = re.match(r"^k8s\.io\.api\.(\w+)\.(\w+)\.(\w+)$", type_name)
        if m:
            return ("message", (f"{m.group(1)}/{m.group(2)}", m.group(3)))
        if type_name in protos[pkg]:
            return ("message", (pkg, type_name))
        raise SystemExit(f"unknown type {type_name} in {pkg}")

    def const(pkg, name):
        snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).upper()
        return pkg.replace("/", "_").upper() + "_" + snake

    wanted, order, queue = set(), [], [(pkg, name) for _, pkg, name in ROOTS]
    while queue:
        key = queue.pop(0)
        if key in wanted:
            continue
        wanted.add(key)
        order.append(key)
        pkg, name = key
        for field, _, _, type_name, _ in protos[pkg][name]:
            kind, target = resolve(pkg, type_name)
            if kind == "message":
                queue.append(target)

    map_shapes = {}
    out = ["// @generated by scripts/protobuf-tables.py from github.com/kubernetes/api's",
           f"// generated.proto files ({label}): the field numbers of the workload types. Do not edit.",
           "",
           "//! Protobuf tables of the core, apps, batch, autoscaling, policy, networking, scheduling,",
           "//! node, storage, admissionregistration and discovery types (generated).",
           "",
           "use super::encode::Shape::{SHAPES};",
           "use super::encode::{Field, Shape, {MAKERS}};",
           "{LIST_META}",
           "use super::meta::{TYPES};",
           ""]
    for pkg, name in sorted(order):
        rows = []
        for field, tag, repeated, type_name, is_map in protos[pkg][name]:
            kind, target = resolve(pkg, type_name)
            shape = f"Message(&{const(*target)})" if kind == "message" else target
            if is_map:
                if shape == "Str":
                    shape = "StringMap"
                elif shape == "Bytes":
                    shape = "BytesMap"
                else:
                    shape_name = (const(*target) + "_SHAPE") if kind == "message" else target.upper()
                    map_shapes[shape_name] = shape
                    shape = f"Map(&{shape_name})"
            if kind == "message" and embedded(pkg, name, field, type_name):
                shape = f"Inline(&{const(*target)})"
            maker = "many" if repeated else "one"
            pointer, omitempty, json_name = gotypes[pkg].get((name, field), (False, True, ""))
            if not repeated and shape in ("Str", "I32", "I64", "Bool", "Double"):
                maker = "kept" if pointer or not omitempty else "dropped"
            # The JSON name where the protobuf one differs (admissionregistration's
            # `Webhooks`, `Expression`: the Go field's name, the JSON tag's lower case).
            field = json_name or field
            rows.append(f"    {maker}({field!r:}, {tag}, {shape}),".replace("'", '"'))
        out.append(f"/// `{pkg}` `{name}`.")
        out.append(f"pub(crate) static {const(pkg, name)}: [Field; {len(rows)}] = [")
        out.extend(rows)
        out.append("];")
        out.append("")
    for shape_name, shape in sorted(map_shapes.items()):
        out.append(f"static {shape_name}: Shape = {shape};")
    out.append("")
    out.append("/// The message of a workload type's `kind` in `apiVersion`.")
    out.append("pub(crate) fn message_of(api_version: &str, kind: &str) -> Option<&'static [Field]> {")
    out.append("    Some(match (api_version, kind) {")
    for api_version, pkg, name in ROOTS:
        out.append(f"        ({api_version!r}, {name!r}) => &{const(pkg, name)},".replace("'", '"'))
    out.append("        _ => return None,")
    out.append("    })")
    out.append("}")
    target = Path(__file__).resolve().parent.parent / "crates/plinth-protobuf/src/generated.rs"
    text = "\n".join(out) + "\n"
    shapes = ["Bool", "Bytes", "BytesMap", "Double", "I32", "I64", "Inline", "IntOrString", "Map",
              "Message", "MicroTime", "Quantity", "RawJson", "Str", "StringMap", "Time"]
    used = [s for s in shapes if re.search(rf"[(, ]{s}[(),]", text.split("use super::meta")[1])]
    text = text.replace("{SHAPES}", "{" + ", ".join(used) + "}")
    makers = [m for m in ["dropped", "kept", "many", "one"] if f"    {m}(" in text]
    text = text.replace("{MAKERS}", ", ".join(makers))
    body = text.split("use super::meta")[1]
    tables = [t for t in ["CONDITION", "DELETE_OPTIONS", "LABEL_SELECTOR", "OBJECT_META", "OWNER_REFERENCE"]
              if re.search(rf"\({t}\)", body)]
    text = text.replace("{TYPES}", "{" + ", ".join(tables) + "}")
    text = text.replace("{LIST_META}\n", "use super::encode::LIST_META;\n" if "(LIST_META)" in body else "")
    target.write_text(text)
    print(f"{len(order)} messages written to {target}")


main()
