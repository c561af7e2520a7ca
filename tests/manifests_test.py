#!/usr/bin/env python3
"""manifests_test.py: checks the Kubernetes manifests under deploy/ without a cluster.

Every YAML file must parse; the objects must reference each other consistently (the
InferencePool selects the model-server pods, targets their port and names the EPP Service
and port; the EPP reads its config from the mounted ConfigMap; the HTTPRoute sends to the
pool; the InferenceService uses the ServingRuntime and one of its formats). Then a real
`cpulm serve` (stories260K, 127.0.0.1) is started with each manifest's arguments (model
path, host and port replaced) to prove the flags are accepted, and its /metrics must
contain every metric the endpoint picker is told to read, with the block size the
prefix-cache scorer is configured for.
Usage: manifests_test.py path/to/cpulm. Needs python3-yaml (scripts/deps.sh).
"""
import os
import re
import subprocess
import sys
import time
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPULM = sys.argv[1]
SHARED = os.environ.get("CPULM_SHARED", os.path.join(ROOT, "..", "shared"))
MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name} {detail}")


def load(rel):
    with open(os.path.join(ROOT, "deploy", rel)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def find(docs, kind, name=None):
    hits = [d for d in docs if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]
    return hits[0] if hits else None


def arg_value(args, flag):
    """Value of --flag=V or --flag V in a list of container args."""
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
        if a == flag and i + 1 < len(args):
            return args[i + 1]
    return None


# ---- every manifest parses ----
all_files = []
for d, _, files in os.walk(os.path.join(ROOT, "deploy")):
    all_files += [os.path.relpath(os.path.join(d, f), os.path.join(ROOT, "deploy"))
                  for f in files if f.endswith((".yaml", ".yml"))]
for rel in sorted(all_files):
    try:
        docs = load(rel)
        check(f"parse {rel}", all("apiVersion" in d and "kind" in d and "metadata" in d for d in docs))
    except yaml.YAMLError as e:
        check(f"parse {rel}", False, str(e))

# ---- llm-d / GIE: pool, picker, gateway ----
ms = load("llm-d/model-server.yaml")
pool_docs = load("llm-d/inferencepool.yaml")
gw = load("llm-d/gateway.yaml")
server = find(ms, "Deployment")
pod = server["spec"]["template"]
ctr = pod["spec"]["containers"][0]
pool = find(pool_docs, "InferencePool")
check("pool_api", pool["apiVersion"] == "inference.networking.k8s.io/v1")
sel = pool["spec"]["selector"]["matchLabels"]
check("pool_selects_model_pods", all(pod["metadata"]["labels"].get(k) == v for k, v in sel.items()), str(sel))
ports = [p["containerPort"] for p in ctr["ports"]]
tports = [p["number"] for p in pool["spec"]["targetPorts"]]
check("pool_target_port", tports and all(p in ports for p in tports), f"{tports} vs {ports}")
check("server_listens_on_pool_port", arg_value(ctr["args"], "--port") == str(tports[0]))
check("server_binds_all", arg_value(ctr["args"], "--host") == "0.0.0.0")
check("readiness_is_ready", ctr["readinessProbe"]["httpGet"]["path"] == "/ready")
check("liveness_is_health", ctr["livenessProbe"]["httpGet"]["path"] == "/health")
epp_ref = pool["spec"]["endpointPickerRef"]
epp_svc = find(pool_docs, "Service", epp_ref["name"])
check("epp_service_exists", epp_svc is not None, epp_ref["name"])
check("epp_service_port", epp_svc and epp_ref["port"]["number"] in [p["port"] for p in epp_svc["spec"]["ports"]])
epp = find(pool_docs, "Deployment", epp_ref["name"])
check("epp_deployment_exists", epp is not None)
eppc = epp["spec"]["template"]["spec"]["containers"][0]
eargs = eppc["args"]
check("epp_service_selects_epp", epp_svc["spec"]["selector"].items() <= epp["spec"]["template"]["metadata"]["labels"].items())
check("epp_pool_name", arg_value(eargs, "--pool-name") == pool["metadata"]["name"])
check("epp_grpc_port", arg_value(eargs, "--grpc-port") == str(epp_ref["port"]["number"]))
cfg_path = arg_value(eargs, "--config-file")
mount = eppc["volumeMounts"][0]
vol = [v for v in epp["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]][0]
cm = find(pool_docs, "ConfigMap", vol["configMap"]["name"])
key = os.path.relpath(cfg_path, mount["mountPath"])
check("epp_config_mounted", cm is not None and key in cm["data"], f"{cfg_path}")
sa = epp["spec"]["template"]["spec"].get("serviceAccountName")
rb = find(pool_docs, "RoleBinding")
check("epp_rbac", sa and rb and rb["subjects"][0]["name"] == sa and find(pool_docs, "Role", rb["roleRef"]["name"]))
epc = yaml.safe_load(cm["data"][key])
check("epp_config_kind", epc["kind"] == "EndpointPickerConfig")
types = {p.get("name", p["type"]): p for p in epc["plugins"]}
refs = [r["pluginRef"] for prof in epc["schedulingProfiles"] for r in prof["plugins"]]
check("epp_profile_refs_exist", all(r in types for r in refs), str(refs))
check("epp_has_picker", any(types[r]["type"].endswith("-picker") for r in refs))
prefix = next((p for p in epc["plugins"] if p["type"] == "prefix-cache-scorer"), None)
check("epp_prefix_scorer", prefix is not None and "prefix-cache-scorer" in refs)
route = find(gw, "HTTPRoute")
gateway = find(gw, "Gateway")
check("route_to_pool", any(b.get("kind") == "InferencePool" and b["name"] == pool["metadata"]["name"] and
                           b.get("group") == "inference.networking.k8s.io"
                           for r in route["spec"]["rules"] for b in r["backendRefs"]))
check("route_parent_gateway", route["spec"]["parentRefs"][0]["name"] == gateway["metadata"]["name"])

# ---- KServe ----
ks = load("kserve/servingruntime.yaml")
rt = find(ks, "ServingRuntime")
isvc = find(ks, "InferenceService")
kctr = rt["spec"]["containers"][0]
check("kserve_container_name", kctr["name"] == "kserve-container")
check("kserve_runtime_ref", isvc["spec"]["predictor"]["model"]["runtime"] == rt["metadata"]["name"])
fmt = isvc["spec"]["predictor"]["model"]["modelFormat"]["name"]
check("kserve_format", fmt in [f["name"] for f in rt["spec"]["supportedModelFormats"]])
check("kserve_model_dir", arg_value(kctr["args"], "-m").startswith("/mnt/models/"))
check("kserve_port", arg_value(kctr["args"], "--port") == str(kctr["ports"][0]["containerPort"]))
check("kserve_ready", kctr["readinessProbe"]["httpGet"]["path"] == "/ready")

# ---- each manifest's cpulm arguments start a real server; its metrics match the picker ----
k8s = find(load("k8s/cpulm.yaml"), "Deployment")["spec"]["template"]["spec"]["containers"][0]


def local_args(args):
    out = list(args)
    for flag, val in (("-m", MODEL), ("--host", "127.0.0.1"), ("--port", "0"), ("-t", "1")):
        if flag in out:
            out[out.index(flag) + 1] = val
        else:
            out += [flag, val]
    return [a.replace("{{.Name}}", "test") for a in out]


def start(args):
    p = subprocess.Popen([CPULM] + local_args(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    m = re.match(r"cpulm serve: listening on http://127\.0\.0\.1:(\d+)", line)
    if not m:
        p.kill()
        p.wait()
        return None, None
    url = f"http://127.0.0.1:{m.group(1)}"
    for _ in range(200):
        try:
            if urllib.request.urlopen(url + "/ready", timeout=2).status == 200:
                return p, url
        except Exception:
            time.sleep(0.05)
    p.kill()
    p.wait()
    return None, None


skipped = not os.path.exists(MODEL)
if skipped:
    print(f"skip live checks: {MODEL} not found (set CPULM_SHARED)")
else:
    for name, c in (("k8s", k8s), ("llm-d", ctr), ("kserve", kctr)):
        p, url = start(c["args"])
        check(f"{name}_args_start_server", p is not None, " ".join(c["args"]))
        if not p:
            continue
        if name == "llm-d":
            text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
            series = {re.split(r"[{ ]", l, 1)[0] for l in text.splitlines() if l and not l.startswith("#")}
            for flag in ("--total-queued-requests-metric", "--total-running-requests-metric",
                         "--kv-cache-usage-percentage-metric", "--cache-info-metric"):
                check(f"metric {flag}", arg_value(eargs, flag) in series, str(arg_value(eargs, flag)))
            for mname in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"):
                check(f"metric {mname}", mname in series)
            bs = re.search(r'^vllm:cache_config_info\{[^}]*block_size="(\d+)"', text, re.M)
            check("prefix_block_matches_server", bs and int(bs.group(1)) == prefix["parameters"]["blockSizeTokens"],
                  bs.group(1) if bs else "no cache_config_info")
        p.terminate()
        check(f"{name}_drains_exit_0", p.wait(timeout=60) == 0)

print(f"manifests: {passed} passed, {failed} failed{', live checks skipped' if skipped else ''}")
sys.exit(1 if failed else 77 if skipped else 0)  # 77: ctest lists the test as skipped
