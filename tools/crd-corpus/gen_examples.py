# Writes crates/plinth-schema/tests/corpus_examples.yaml: for each corpus CRD a minimal valid
# instance (its required fields, with OVERRIDES where a rule or pattern needs a real value) and
# an invalid one (a wrong-typed or unsupported value at a field of spec) with the causes
# kube-apiserver gives for it, written from kube's message formats.
import yaml, os, re, sys, json
yaml.SafeLoader.add_constructor("tag:yaml.org,2002:value", lambda l, n: l.construct_scalar(n))
D=os.path.join(os.path.dirname(__file__), '../../crates/plinth-schema/tests/crds')
CANDIDATES=['example','a','1','example.com','10s','1m','v1','a-b','https://example.com','default','1Gi','100m','0 0 * * *','5m0s','ExampleKind','example.com/v1']
def string_for(s):
    if 'enum' in s: return s['enum'][0]
    fmt=s.get('format')
    if fmt=='date-time': return '2024-01-01T00:00:00Z'
    if fmt=='duration': return '10s'
    if fmt=='byte': return 'ZXhhbXBsZQ=='
    if fmt=='uri': return 'https://example.com'
    if fmt=='email': return 'a@example.com'
    n=s.get('minLength',0)
    pat=s.get('pattern')
    for c in CANDIDATES:
        if len(c)<n: c=c+'a'*(n-len(c))
        if 'maxLength' in s and len(c)>s['maxLength']: continue
        if pat:
            try:
                if not re.search(pat,c): continue
            except re.error: pass
        return c
    return 'a'*max(n,1)
def gen(s):
    if 'default' in s and s.get('type')!='object': return s['default']
    if s.get('x-kubernetes-int-or-string'): return 1
    t=s.get('type')
    if t=='object' or (t is None and 'properties' in s):
        o={}
        for r in s.get('required',[]):
            sub=s.get('properties',{}).get(r)
            if sub is None: sub={}
            o[r]=gen(sub)
        return o
    if t=='array':
        return [gen(s.get('items',{})) for _ in range(s.get('minItems',0))]
    if t=='string': return string_for(s)
    if t=='integer':
        v=max(s.get('minimum',1),1)
        return int(v)
    if t=='number': return max(s.get('minimum',1),1)
    if t=='boolean': return False
    return {}
def has_rules(s):
    if isinstance(s,dict):
        if 'x-kubernetes-validations' in s: return True
        return any(has_rules(v) for v in s.values())
    if isinstance(s,list): return any(has_rules(v) for v in s)
    return False
def quote(v): return json.dumps(v)
def candidates(schema, value, path):
    # leaves reachable in objects that exist in `value`
    out=[]
    if not isinstance(value,dict): return out
    if any(k in schema for k in ('oneOf','anyOf','allOf','not')) or schema.get('maxProperties') is not None: return out
    for k,sub in sorted(schema.get('properties',{}).items()):
        p=f'{path}.{k}'
        t=sub.get('type')
        if k in value:
            if t=='object': out+=candidates(sub,value[k],p)
            continue
        if sub.get('x-kubernetes-int-or-string') or any(x in sub for x in ('oneOf','anyOf','allOf','not')): continue
        if t in ('integer','boolean') and 'format' not in sub or t=='integer':
            out.append(('type',p,k,t,sub))
        elif t=='string' and 'enum' in sub and all(isinstance(e,str) for e in sub['enum']) and len(sub['enum'])>0:
            out.append(('enum',p,k,t,sub))
        elif t=='string':
            out.append(('string',p,k,t,sub))
    return out
def setp(obj,path,val):
    parts=path.split('.')
    cur=obj
    for p in parts[:-1]: cur=cur[p]
    cur[parts[-1]]=val
# Fields a generated minimal instance cannot guess: values its CEL rules, patterns or
# minProperties ask for, as the projects' own examples set them.
OVERRIDES = {
 'cluster-api__cluster.x-k8s.io_clusters.yaml': {'spec': {'paused': True}},
 'crossplane__pkg.crossplane.io_providers.yaml': {'spec': {'package': 'xpkg.crossplane.io/crossplane-contrib/provider-nop:v0.2.1'}},
 'external-snapshotter__snapshot.storage.k8s.io_volumesnapshotcontents.yaml': {'spec': {'driver': 'hostpath.csi.k8s.io', 'source': {'volumeHandle': 'vol-1'}, 'volumeSnapshotRef': {'name': 'snap', 'namespace': 'default'}}},
 'external-snapshotter__snapshot.storage.k8s.io_volumesnapshots.yaml': {'spec': {'source': {'persistentVolumeClaimName': 'data'}}},
 'flux-helm-controller__helm.toolkit.fluxcd.io_helmreleases.yaml': {'spec': {'chart': {'spec': {'chart': 'podinfo', 'sourceRef': {'kind': 'HelmRepository', 'name': 'podinfo'}}}}},
 'flux-source-controller__source.toolkit.fluxcd.io_ocirepositories.yaml': {'spec': {'url': 'oci://ghcr.io/stefanprodan/manifests/podinfo'}},
 'gateway-api__gateway.networking.k8s.io_tcproutes.yaml': {'spec': {'rules': [{'backendRefs': [{'name': 'web', 'port': 8080}]}]}},
 'gateway-api__gateway.networking.k8s.io_tlsroutes.yaml': {'spec': {'hostnames': ['example.com'], 'rules': [{'backendRefs': [{'name': 'web', 'port': 8443}]}]}},
}
def merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict): merge(a[k], v)
        else: a[k] = v
entries=[]
for f in sorted(os.listdir(D)):
    if not f.endswith('.yaml'): continue
    crd=yaml.safe_load(open(os.path.join(D,f)))
    v=[v for v in crd['spec']['versions'] if v.get('storage')][0]
    s=v['schema']['openAPIV3Schema']
    group=crd['spec']['group']; kind=crd['spec']['names']['kind']
    inst={'apiVersion':f"{group}/{v['name']}",'kind':kind,'metadata':{'name':'example'}}
    if crd['spec']['scope']=='Namespaced': inst['metadata']['namespace']='default'
    props=s.get('properties',{})
    for r in s.get('required',[]):
        if r in ('apiVersion','kind','metadata'): continue
        inst[r]=gen(props.get(r,{}))
    if 'spec' in props and 'spec' not in inst:
        inst['spec']=gen(props['spec'])
    merge(inst, OVERRIDES.get(f, {}))
    bad=json.loads(json.dumps(inst))
    causes=[]
    if 'spec' in props and isinstance(inst.get('spec'),dict):
        cands=candidates(props['spec'],inst['spec'],'spec')
        typ=[c for c in cands if c[0]=='type']
        enm=[c for c in cands if c[0]=='enum']
        chosen=typ[:1]+enm[:1]
        if not chosen:
            chosen=[c for c in cands if c[0]=='string'][:1]
        for kindc,p,k,t,sub in chosen:
            if kindc=='string':
                setp(bad,p,12345)
                causes.append(f'{p}: Invalid value: 12345: {p} in body must be of type string: "integer"')
            elif kindc=='type':
                setp(bad,p,'not-a-'+t)
                causes.append(f'{p}: Invalid value: "not-a-{t}": {p} in body must be of type {t}: "string"')
            else:
                setp(bad,p,'bogus-value')
                causes.append(f'{p}: Unsupported value: "bogus-value": supported values: '+', '.join(quote(e) for e in sub['enum']))
    if not causes and 'spec' not in props and 'deletionPolicy' in props:
        bad['deletionPolicy']='bogus-value'
        causes.append('deletionPolicy: Unsupported value: "bogus-value": supported values: '+', '.join(quote(e) for e in props['deletionPolicy']['enum']))
    if not causes and props.get('spec',{}).get('type')=='object':
        bad['spec']='not-an-object'
        causes.append('spec: Invalid value: "not-an-object": spec in body must be of type object: "string"')
    if causes and has_rules(s):
        causes.append('<nil>: Invalid value: "null": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation')
    e={'crd':f,'valid':[inst]}
    if causes: e['invalid']=[{'object':bad,'causes':sorted(causes)}]
    else: e['invalid']=[]; print('NO INVALID', f, file=sys.stderr)
    entries.append(e)
print(yaml.safe_dump(entries, sort_keys=False, width=100))
