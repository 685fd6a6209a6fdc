#!/usr/bin/env python3
"""Checks deploy/: the Kubernetes manifests (kustomize) and the container image definition.

  python3 deploy/validate.py [--crd CRD.yaml] [--npullm BIN --model GGUF]

- The InferencePool is validated against the openAPIV3Schema of the CRD that the Gateway API
  Inference Extension publishes (../shared/k8s/, copied unchanged from upstream), with Debian's
  python3-jsonschema; the CRD's two CEL rules (x-kubernetes-validations), which jsonschema cannot
  run, are checked by hand.
- Every other manifest is checked structurally: the fields each kind needs, and that the pieces fit
  together (selectors match the pods' labels, ports and probes name ports the pods have, the pool's
  endpoint picker is a Service with that port, the route's backend is the pool, the grace period
  covers the preStop pause and the drain, the image's user and port are the pod's).
- The Dockerfile: a Debian 12 base, the .deb made by scripts/package-deb.sh (as the DebPackage test
  makes it) installed with apt, a user that is not root, the model from a volume.
- With --npullm and --model: `npullm serve --print-memory` with the Deployment's flags prints a
  resources block whose memory is (file + K/V) x 1.1 + the process's own, as the Deployment says.

Exit status 0 when everything holds, 1 otherwise (each failure named), 77 when the CRD or the model
is missing (a skip, unless NPULLM_REQUIRE_DATA=1, when it is a failure).
"""
import argparse
import copy
import os
import re
import shutil
import subprocess
import sys

import jsonschema
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
K8S = os.path.join(HERE, "k8s")

API_VERSIONS = {
    "Deployment": "apps/v1",
    "Service": "v1",
    "ServiceAccount": "v1",
    "ConfigMap": "v1",
    "PersistentVolumeClaim": "v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "InferencePool": "inference.networking.k8s.io/v1",
    "HTTPRoute": "gateway.networking.k8s.io/v1",
}
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

failures = []


def fail(where, msg):
    failures.append(f"{where}: {msg}")


def check(cond, where, msg):
    if not cond:
        fail(where, msg)
    return cond


def load_kustomization():
    path = os.path.join(K8S, "kustomization.yaml")
    with open(path) as f:
        k = yaml.safe_load(f)
    check(k.get("apiVersion") == "kustomize.config.k8s.io/v1beta1", "kustomization.yaml", "apiVersion")
    check(k.get("kind") == "Kustomization", "kustomization.yaml", "kind")
    resources = k.get("resources") or []
    check(resources, "kustomization.yaml", "no resources")
    listed = set(resources)
    on_disk = {f for f in os.listdir(K8S) if f.endswith(".yaml") and f != "kustomization.yaml"}
    check(listed == on_disk, "kustomization.yaml", f"resources {sorted(listed)} != the folder's manifests {sorted(on_disk)}")
    docs = []
    for r in resources:
        p = os.path.join(K8S, r)
        if not check(os.path.isfile(p), "kustomization.yaml", f"resource {r} is not a file"):
            continue
        with open(p) as f:
            for d in yaml.safe_load_all(f):
                if d is not None:
                    docs.append((r, d))
    return k, docs


def pod_containers(dep):
    return ((dep.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []


def port_of(container, ref):
    """The containerPort a probe or Service's targetPort names (a name or a number), or None."""
    for p in container.get("ports") or []:
        if ref == p.get("name") or ref == p.get("containerPort"):
            return p.get("containerPort")
    return None


def quantity_bytes(q):
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)?", str(q))
    if not m:
        return None
    return int(m.group(1)) * {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}[m.group(2)]


def flag(args, name):
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None


def check_common(where, d):
    kind = d.get("kind")
    if not check(kind in API_VERSIONS, where, f"unexpected kind {kind}"):
        return False
    check(d.get("apiVersion") == API_VERSIONS[kind], where, f"{kind} apiVersion {d.get('apiVersion')} (want {API_VERSIONS[kind]})")
    name = (d.get("metadata") or {}).get("name", "")
    check(bool(DNS_LABEL.match(name)) and len(name) <= 63, where, f"metadata.name '{name}' is not a DNS label")
    return True


def check_deployment(where, d, objects):
    spec = d.get("spec") or {}
    sel = (spec.get("selector") or {}).get("matchLabels") or {}
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    check(sel and all(labels.get(k) == v for k, v in sel.items()), where, f"selector {sel} does not match the pod labels {labels}")
    pod = (spec.get("template") or {}).get("spec") or {}
    containers = pod.get("containers") or []
    check(containers, where, "no containers")
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    for c in containers:
        cw = f"{where} container {c.get('name')}"
        check(c.get("name") and c.get("image"), cw, "name and image are required")
        for p in c.get("ports") or []:
            check(isinstance(p.get("containerPort"), int) and 0 < p["containerPort"] < 65536, cw, f"bad containerPort {p}")
        for probe in ("readinessProbe", "livenessProbe"):
            pr = c.get(probe)
            if not check(pr, cw, f"no {probe}"):
                continue
            target = (pr.get("httpGet") or pr.get("grpc") or {}).get("port")
            check(port_of(c, target) is not None, cw, f"{probe} port {target} is not a port of the container")
        for m in c.get("volumeMounts") or []:
            check(m.get("name") in volumes, cw, f"volumeMount {m.get('name')} names no volume")
    for v in volumes.values():
        claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
        if claim:
            check(("PersistentVolumeClaim", claim) in objects, where, f"volume {v['name']} claims {claim}, which is not defined")
        cm = (v.get("configMap") or {}).get("name")
        if cm:
            check(("ConfigMap", cm) in objects, where, f"volume {v['name']} mounts ConfigMap {cm}, which is not defined")
    sa = pod.get("serviceAccountName")
    if sa:
        check(("ServiceAccount", sa) in objects, where, f"serviceAccountName {sa} is not defined")


def check_npullm_deployment(where, d):
    """The model server's own pod: probes, drain, resources, user, model volume."""
    pod = d["spec"]["template"]["spec"]
    c = pod["containers"][0]
    args = [str(a) for a in c.get("args") or []]
    check(c["readinessProbe"].get("httpGet", {}).get("path") == "/health", where, "readinessProbe must GET /health (503 while loading and draining)")
    check(c["livenessProbe"].get("httpGet", {}).get("path") == "/livez", where, "livenessProbe must GET /livez (200 in every phase)")
    drain = flag(args, "--drain-timeout")
    check(drain is not None, where, "no --drain-timeout in args")
    pre = ((c.get("lifecycle") or {}).get("preStop") or {}).get("exec", {}).get("command") or []
    pause = int(pre[1]) if len(pre) == 2 and pre[0] == "sleep" else 0
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if drain is not None:
        check(grace >= pause + int(drain) + 5, where,
              f"terminationGracePeriodSeconds {grace} does not cover the preStop pause ({pause} s) + --drain-timeout ({drain} s) + 5 s")
    res = c.get("resources") or {}
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    check("cpu" in req and "memory" in req, where, "requests need cpu and memory")
    mem, mem_lim = quantity_bytes(req.get("memory")), quantity_bytes(lim.get("memory"))
    check(mem is not None and mem_lim is not None and mem_lim >= mem, where, f"memory limit {lim.get('memory')} below the request {req.get('memory')}")
    threads = flag(args, "-t") or flag(args, "--threads")
    check(threads is not None and str(req.get("cpu")) == threads, where, f"cpu request {req.get('cpu')} is not the worker threads (-t {threads})")
    model = flag(args, "-m") or flag(args, "--model")
    mounts = [m for m in c.get("volumeMounts") or [] if model and model.startswith(m["mountPath"].rstrip("/") + "/")]
    check(mounts and mounts[0].get("readOnly"), where, f"the model {model} is not on a read-only mounted volume")
    sc = pod.get("securityContext") or {}
    check(sc.get("runAsNonRoot") is True and sc.get("runAsUser", 0) != 0, where, "the pod must run as a user that is not root")
    return {"port": c["ports"][0]["containerPort"], "uid": sc.get("runAsUser"), "args": args, "memory": mem,
            "mounts": [m["mountPath"] for m in c.get("volumeMounts") or []], "labels": d["spec"]["template"]["metadata"]["labels"]}


def check_service(where, d, pods):
    spec = d.get("spec") or {}
    sel = spec.get("selector") or {}
    matches = [p for p in pods if sel and all(p["labels"].get(k) == v for k, v in sel.items())]
    if not check(matches, where, f"selector {sel} matches no pod template"):
        return
    for p in spec.get("ports") or []:
        check(isinstance(p.get("port"), int), where, f"port {p} has no number")
        target = p.get("targetPort", p.get("port"))
        check(any(port_of(c, target) is not None for pod in matches for c in pod["containers"]), where,
              f"targetPort {target} is not a port of the pods it selects")


def crd_schema(crd_path):
    with open(crd_path) as f:
        crd = yaml.safe_load(f)
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    schema = copy.deepcopy(versions["v1"]["schema"]["openAPIV3Schema"])
    return crd, schema


def cel_rules(where, pool):
    """The CRD's x-kubernetes-validations, which jsonschema does not run, written out."""
    spec = pool.get("spec") or {}
    ref = spec.get("endpointPickerRef") or {}
    if ref:
        check(ref.get("kind", "Service") != "Service" or "port" in ref, where, "endpointPickerRef: port is required when kind is 'Service'")
    numbers = [p.get("number") for p in spec.get("targetPorts") or []]
    check(len(numbers) == len(set(numbers)), where, "targetPorts: port number must be unique")


def check_dockerfile(npullm_pod):
    where = "Dockerfile"
    with open(os.path.join(HERE, "Dockerfile")) as f:
        lines = [l.strip() for l in f.read().replace("\\\n", " ").splitlines() if l.strip() and not l.strip().startswith("#")]
    froms = [l.split()[1] for l in lines if l.upper().startswith("FROM ")]
    check(froms and all(re.match(r"debian:bookworm(-slim)?$", b) for b in froms), where, f"bases {froms}: Debian 12 (bookworm) only")
    final = lines[max(i for i, l in enumerate(lines) if l.upper().startswith("FROM ")):]
    text = "\n".join(lines)
    check("scripts/package-deb.sh" in text, where, "the .deb must come from scripts/package-deb.sh, as the DebPackage test's")
    check(re.search(r"apt-get install [^\n]*/tmp/npullm_\*\.deb", "\n".join(final)), where, "the final stage must apt-get install the .deb")
    users = [l.split()[1] for l in final if l.upper().startswith("USER ")]
    check(users and users[-1].split(":")[0] not in ("root", "0"), where, f"USER {users}: not root")
    if users and npullm_pod:
        check(users[-1].split(":")[0] == str(npullm_pod["uid"]), where, f"USER {users[-1]} is not the pod's runAsUser {npullm_pod['uid']}")
    expose = [l.split()[1] for l in final if l.upper().startswith("EXPOSE ")]
    entry = next((l for l in final if l.upper().startswith("ENTRYPOINT ")), "")
    check(entry and '"serve"' in entry and '"0.0.0.0"' in entry, where, "ENTRYPOINT must be npullm serve on 0.0.0.0")
    if npullm_pod:
        port = str(npullm_pod["port"])
        check(expose == [port], where, f"EXPOSE {expose} is not the pod's port {port}")
        check(f'"--port", "{port}"' in entry, where, f"ENTRYPOINT's --port is not the pod's port {port}")
        vol = next((l for l in final if l.upper().startswith("VOLUME ")), "")
        for m in npullm_pod["mounts"]:
            check(f'"{m}"' in vol, where, f"VOLUME does not declare {m}, which the pod mounts")
    ignore = os.path.join(HERE, "Dockerfile.dockerignore")
    check(os.path.isfile(ignore) and "build*" in open(ignore).read(), where, "Dockerfile.dockerignore must keep build folders out of the context")


def check_print_memory(binary, model, pod):
    """`npullm serve --print-memory` with the Deployment's flags (another model): (file + K/V) x 1.1 + process."""
    where = "serve --print-memory"
    args = list(pod["args"])
    args[args.index("-m") + 1] = model
    out = subprocess.run([binary, "serve", *args, "--print-memory", "--no-cache"], capture_output=True, text=True, timeout=300)
    if not check(out.returncode == 0, where, f"exit {out.returncode}: {out.stderr[-2000:]}"):
        return
    doc = yaml.safe_load(out.stdout)
    req = doc["resources"]["requests"]
    mib = {m.group(1): float(m.group(2)) for m in re.finditer(r"^#\s+(model file|K/V|process)\s+([\d.]+) MiB", out.stdout, re.M)}
    check(set(mib) == {"model file", "K/V", "process"}, where, f"no file, K/V and process lines in:\n{out.stdout}")
    want = (os.path.getsize(model) + mib.get("K/V", 0) * (1 << 20)) * 1.1 + mib.get("process", 0) * (1 << 20)
    got = quantity_bytes(req["memory"])
    check(got is not None and abs(got - want) <= (1 << 20) + 0.001 * want, where,
          f"memory {req['memory']} is not (file + K/V) x 1.1 + process = {want / (1 << 20):.1f} MiB")
    check(str(req.get("cpu")) == flag(args, "-t"), where, f"cpu {req.get('cpu')} is not -t")
    print(f"validate: serve --print-memory on {os.path.basename(model)} with the Deployment's flags: memory {req['memory']}, cpu {req['cpu']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--crd", default=os.path.join(ROOT, "..", "shared", "k8s", "inference.networking.k8s.io_inferencepools.yaml"))
    ap.add_argument("--npullm", help="an npullm binary, for the --print-memory check")
    ap.add_argument("--model", help="a small GGUF model for the --print-memory check")
    a = ap.parse_args()
    for need in [a.crd] + ([a.model] if a.model else []):
        if not os.path.isfile(need):
            print(f"validate: {need} is missing (test data)", file=sys.stderr)
            return 1 if os.environ.get("NPULLM_REQUIRE_DATA") == "1" else 77

    _, docs = load_kustomization()
    objects = {}
    for where, d in docs:
        if check_common(f"{where} {d.get('kind')}", d):
            objects[(d["kind"], d["metadata"]["name"])] = d
    kinds = {k for k, _ in objects}
    for k in ("Deployment", "Service", "InferencePool", "HTTPRoute"):
        check(k in kinds, "deploy/k8s", f"no {k}")

    pods, npullm_pod = [], None
    for (kind, name), d in objects.items():
        if kind == "Deployment":
            check_deployment(f"Deployment {name}", d, objects)
            pods.append({"labels": d["spec"]["template"]["metadata"].get("labels") or {}, "containers": pod_containers(d)})
    _, schema = crd_schema(a.crd)
    validator = jsonschema.Draft7Validator(schema)
    pools = {n: d for (k, n), d in objects.items() if k == "InferencePool"}
    for name, pool in pools.items():
        where = f"InferencePool {name}"
        for e in sorted(validator.iter_errors(pool), key=lambda e: list(e.path)):
            fail(where, f"schema: {'/'.join(map(str, e.path))}: {e.message}")
        cel_rules(where, pool)
        sel = pool["spec"]["selector"]["matchLabels"]
        members = [(n, d) for (k, n), d in objects.items() if k == "Deployment"
                   and all((d["spec"]["template"]["metadata"].get("labels") or {}).get(x) == v for x, v in sel.items())]
        if check(len(members) == 1, where, f"selector {sel} must select the model server's pods (selects {[n for n, _ in members]})"):
            npullm_pod = check_npullm_deployment(f"Deployment {members[0][0]}", members[0][1])
            check([p["number"] for p in pool["spec"]["targetPorts"]] == [npullm_pod["port"]], where,
                  f"targetPorts are not the model server's port {npullm_pod['port']}")
        ref = pool["spec"].get("endpointPickerRef") or {}
        svc = objects.get(("Service", ref.get("name")))
        if check(svc is not None, where, f"endpointPickerRef names Service {ref.get('name')}, which is not defined"):
            check(ref.get("port", {}).get("number") in [p.get("port") for p in svc["spec"].get("ports") or []], where,
                  f"endpointPickerRef port {ref.get('port')} is not a port of Service {ref.get('name')}")
            epp = [d for (k, n), d in objects.items() if k == "Deployment"
                   and all((d["spec"]["template"]["metadata"].get("labels") or {}).get(x) == v for x, v in svc["spec"]["selector"].items())]
            if check(len(epp) == 1, where, "the endpoint picker's Service selects no single Deployment"):
                args = [str(x) for x in pod_containers(epp[0])[0].get("args") or []]
                check(flag(args, "--pool-name") == name, where, f"the endpoint picker's --pool-name is {flag(args, '--pool-name')}, not {name}")
                cfg = flag(args, "--config-file")
                cms = [d for (k, n), d in objects.items() if k == "ConfigMap" and cfg and os.path.basename(cfg) in (d.get("data") or {})]
                if check(len(cms) == 1, where, f"no ConfigMap holds the picker's --config-file {cfg}"):
                    conf = yaml.safe_load(cms[0]["data"][os.path.basename(cfg)])
                    check(conf.get("kind") == "EndpointPickerConfig", where, "the picker's config is not an EndpointPickerConfig")
                    refs = {p["pluginRef"] for prof in conf.get("schedulingProfiles") or [] for p in prof.get("plugins") or []}
                    types = {p.get("name", p["type"]) for p in conf.get("plugins") or []}
                    check(refs <= types, where, f"profiles use plugins {sorted(refs - types)} that are not declared")
    for (kind, name), d in objects.items():
        where = f"{kind} {name}"
        if kind == "Service":
            check_service(where, d, pods)
        elif kind == "HTTPRoute":
            spec = d.get("spec") or {}
            check(spec.get("parentRefs"), where, "no parentRefs (the Gateway)")
            backends = [b for r in spec.get("rules") or [] for b in r.get("backendRefs") or []]
            check(backends, where, "no backendRefs")
            for b in backends:
                check(b.get("group") == "inference.networking.k8s.io" and b.get("kind") == "InferencePool" and b.get("name") in pools,
                      where, f"backendRef {b} is not the InferencePool")
        elif kind == "RoleBinding":
            check(("Role", d["roleRef"]["name"]) in objects, where, f"roleRef {d['roleRef']['name']} is not defined")
            for s in d.get("subjects") or []:
                check(("ServiceAccount", s["name"]) in objects, where, f"subject {s['name']} is not defined")
        elif kind == "PersistentVolumeClaim":
            check(d["spec"].get("accessModes") and quantity_bytes(d["spec"]["resources"]["requests"]["storage"]), where, "accessModes and a size")

    check_dockerfile(npullm_pod)
    if a.npullm and a.model and npullm_pod:
        check_print_memory(a.npullm, a.model, npullm_pod)

    # kubectl's kustomize, where one is installed (not on CI's Debian): it must render the same objects.
    kubectl = shutil.which("kubectl")
    if kubectl:
        out = subprocess.run([kubectl, "kustomize", K8S], capture_output=True, text=True, timeout=60)
        if check(out.returncode == 0, "kubectl kustomize", out.stderr.strip()[-500:]):
            rendered = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out.stdout) if d}
            check(rendered == set(objects), "kubectl kustomize", f"renders {sorted(rendered)}, not {sorted(objects)}")
            print("validate: kubectl kustomize renders the same objects")

    if failures:
        for f in failures:
            print(f"FAIL {f}", file=sys.stderr)
        return 1
    print(f"validate: {len(objects)} objects in deploy/k8s ({', '.join(sorted(k for k in kinds))}) and deploy/Dockerfile hold; "
          f"the InferencePool is valid against {os.path.basename(a.crd)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
