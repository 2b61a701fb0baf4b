# Fetches the corpus CRDs byte for byte from repository snapshots (git show <commit>:<path>)
# into crates/plinth-schema/tests/crds and writes its SOURCES.md. M is where the snapshots are.
import subprocess, hashlib, os, yaml, sys
yaml.SafeLoader.add_constructor("tag:yaml.org,2002:value", lambda l, n: l.construct_scalar(n))
M='/work/.mirror'
picks = [
 ("cert-manager","cert-manager+cert-manager",["deploy/crds/cert-manager.io_issuers.yaml","deploy/crds/cert-manager.io_clusterissuers.yaml","deploy/crds/cert-manager.io_certificaterequests.yaml","deploy/crds/acme.cert-manager.io_orders.yaml","deploy/crds/acme.cert-manager.io_challenges.yaml"]),
 ("gateway-api","kubernetes-sigs+gateway-api",["config/crd/standard/gateway.networking.k8s.io_httproutes.yaml","config/crd/standard/gateway.networking.k8s.io_grpcroutes.yaml","config/crd/standard/gateway.networking.k8s.io_referencegrants.yaml","config/crd/experimental/gateway.networking.k8s.io_tcproutes.yaml","config/crd/experimental/gateway.networking.k8s.io_tlsroutes.yaml"]),
 ("prometheus-operator","prometheus-operator+prometheus-operator",["example/prometheus-operator-crd-full/monitoring.coreos.com_alertmanagers.yaml","example/prometheus-operator-crd-full/monitoring.coreos.com_podmonitors.yaml","example/prometheus-operator-crd-full/monitoring.coreos.com_probes.yaml","example/prometheus-operator-crd-full/monitoring.coreos.com_prometheusrules.yaml","example/prometheus-operator-crd-full/monitoring.coreos.com_thanosrulers.yaml","example/prometheus-operator-crd-full/monitoring.coreos.com_scrapeconfigs.yaml","example/prometheus-operator-crd-full/monitoring.coreos.com_alertmanagerconfigs.yaml"]),
 ("argo-cd","argoproj+argo-cd",["manifests/crds/application-crd.yaml","manifests/crds/applicationset-crd.yaml","manifests/crds/appproject-crd.yaml"]),
 ("argo-rollouts","argoproj+argo-rollouts",["manifests/crds/rollout-crd.yaml","manifests/crds/analysis-template-crd.yaml"]),
 ("flux-source-controller","fluxcd+source-controller",["config/crd/bases/source.toolkit.fluxcd.io_gitrepositories.yaml","config/crd/bases/source.toolkit.fluxcd.io_helmrepositories.yaml","config/crd/bases/source.toolkit.fluxcd.io_ocirepositories.yaml"]),
 ("flux-kustomize-controller","fluxcd+kustomize-controller",["config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml"]),
 ("flux-helm-controller","fluxcd+helm-controller",["config/crd/bases/helm.toolkit.fluxcd.io_helmreleases.yaml"]),
 ("keda","kedacore+keda",["config/crd/bases/keda.sh_scaledobjects.yaml","config/crd/bases/keda.sh_scaledjobs.yaml","config/crd/bases/keda.sh_triggerauthentications.yaml"]),
 ("velero","vmware-tanzu+velero",["config/crd/v1/bases/velero.io_backups.yaml","config/crd/v1/bases/velero.io_restores.yaml","config/crd/v1/bases/velero.io_schedules.yaml","config/crd/v1/bases/velero.io_backupstoragelocations.yaml"]),
 ("external-snapshotter","kubernetes-csi+external-snapshotter",["client/config/crd/snapshot.storage.k8s.io_volumesnapshots.yaml","client/config/crd/snapshot.storage.k8s.io_volumesnapshotclasses.yaml","client/config/crd/snapshot.storage.k8s.io_volumesnapshotcontents.yaml"]),
 ("metallb","metallb+metallb",["config/crd/bases/metallb.io_ipaddresspools.yaml","config/crd/bases/metallb.io_l2advertisements.yaml","config/crd/bases/metallb.io_bgppeers.yaml"]),
 ("kueue","kubernetes-sigs+kueue",["config/components/crd/bases/kueue.x-k8s.io_clusterqueues.yaml","config/components/crd/bases/kueue.x-k8s.io_localqueues.yaml","config/components/crd/bases/kueue.x-k8s.io_resourceflavors.yaml","config/components/crd/bases/kueue.x-k8s.io_workloads.yaml"]),
 ("gatekeeper","open-policy-agent+gatekeeper",["charts/gatekeeper/crds/constrainttemplate-customresourcedefinition.yaml"]),
 ("external-secrets","external-secrets+external-secrets",["config/crds/bases/external-secrets.io_externalsecrets.yaml","config/crds/bases/external-secrets.io_clusterexternalsecrets.yaml"]),
 ("opentelemetry-operator","open-telemetry+opentelemetry-operator",["config/crd/bases/opentelemetry.io_opentelemetrycollectors.yaml","config/crd/bases/opentelemetry.io_instrumentations.yaml"]),
 ("external-dns","kubernetes-sigs+external-dns",["config/crd/standard/dnsendpoints.externaldns.k8s.io.yaml"]),
 ("cloudnative-pg","cloudnative-pg+cloudnative-pg",["config/crd/bases/postgresql.cnpg.io_backups.yaml","config/crd/bases/postgresql.cnpg.io_scheduledbackups.yaml","config/crd/bases/postgresql.cnpg.io_poolers.yaml"]),
 ("strimzi","strimzi+strimzi-kafka-operator",["helm-charts/helm3/strimzi-kafka-operator/crds/043-Crd-kafkatopic.yaml","helm-charts/helm3/strimzi-kafka-operator/crds/044-Crd-kafkauser.yaml","helm-charts/helm3/strimzi-kafka-operator/crds/045-Crd-kafkanodepool.yaml"]),
 ("crossplane","crossplane+crossplane",["cluster/crds/apiextensions.crossplane.io_compositeresourcedefinitions.yaml","cluster/crds/pkg.crossplane.io_providers.yaml"]),
 ("cluster-api","kubernetes-sigs+cluster-api",["core/config/crd/bases/cluster.x-k8s.io_clusters.yaml","core/config/crd/bases/cluster.x-k8s.io_machinedeployments.yaml","core/config/crd/bases/cluster.x-k8s.io_machines.yaml"]),
 ("tekton","tektoncd+pipeline",["config/300-crds/300-task.yaml","config/300-crds/300-pipeline.yaml"]),
 ("chaos-mesh","chaos-mesh+chaos-mesh",["config/crd/bases/chaos-mesh.org_podchaos.yaml","config/crd/bases/chaos-mesh.org_networkchaos.yaml"]),
 ("kyverno","kyverno+kyverno",["config/crds/kyverno/kyverno.io_policies.yaml"]),
 ("sealed-secrets","bitnami-labs+sealed-secrets",["helm/sealed-secrets/crds/bitnami.com_sealedsecrets.yaml"]),
 ("network-attachment-definition","k8snetworkplumbingwg+network-attachment-definition-client",["artifacts/networks-crd.yaml"]),
]
rows=[]
for project, repo, paths in picks:
    g=f'{M}/{repo}/repo'
    commit=subprocess.check_output(['git','--git-dir',g,'rev-parse','HEAD']).decode().strip()
    for path in paths:
        data=subprocess.check_output(['git','--git-dir',g,'show',f'HEAD:{path}'])
        blob=subprocess.check_output(['git','--git-dir',g,'rev-parse',f'HEAD:{path}']).decode().strip()
        docs=[d for d in yaml.safe_load_all(data) if d]
        ok = len(docs)==1 and docs[0].get('kind')=='CustomResourceDefinition' and docs[0].get('apiVersion')=='apiextensions.k8s.io/v1'
        name=f'{project}__{os.path.basename(path)}'
        if not ok:
            print('SKIP', name, len(docs), file=sys.stderr); continue
        open(name,'wb').write(data)
        crd=docs[0]
        vers=','.join(v['name'] for v in crd['spec']['versions'])
        rows.append((name, project, repo.replace('+','/'), path, commit, blob, hashlib.sha256(data).hexdigest(), crd['metadata']['name'], crd['spec']['names']['kind'], vers, len(data)))
with open('SOURCES.md','w') as f:
    f.write('''# Real-world CRD corpus

`apiextensions.k8s.io/v1` CustomResourceDefinitions from widely used public projects, kept as test
data: each must compile, install through kubectl, become Established, serve `kubectl explain`,
accept a valid instance and reject a crafted invalid one as kube-apiserver does (the instances are
in `../corpus_examples.yaml`). Together with the 11 CRDs in `../shared/crds` beside the checkout.

- Each file is the upstream file byte for byte (`git show <commit>:<path>` from a snapshot of the
  repository); `blob` is its git blob id there, `sha256` its digest here.
- File name: `<project>__<upstream file name>`; one CRD per file.
- Licence: every repository used is under the Apache License 2.0 (its root `LICENSE` at the commit
  listed); the files are redistributed unmodified under it.

| file | project | repository | path | commit | blob | sha256 | CRD | kind | versions | bytes | licence |
|---|---|---|---|---|---|---|---|---|---|---|---|
''')
    for r in rows:
        f.write('| `%s` | %s | %s | `%s` | `%s` | `%s` | `%s` | `%s` | %s | %s | %d | Apache-2.0 |\n' % (r[0],r[1],r[2],r[3],r[4][:12],r[5][:12],r[6][:16],r[7],r[8],r[9],r[10]))
print(len(rows))
