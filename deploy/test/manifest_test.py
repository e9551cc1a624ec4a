#!/usr/bin/python3
"""Manifest test for deploy/: render, validate, list RBAC.

usage: manifest_test.py DEPLOY_DIR [CHILDREN.json ...]

1. Renders deploy/base and every deploy/overlays/* with a small kustomize
   renderer of our own (the subset the manifests use: resources, bases,
   namespace, images, patchesStrategicMerge). `kubectl kustomize` renders them
   too, and both renderings must be equal object by object; without kubectl
   (scripts/setup.sh installs Debian's kubernetes-client) the test fails.
2. Validates every rendered object: DNS-1123 names, label keys and values,
   Deployment selectors against their pod template labels, Service selectors
   against the pod labels in the same rendering, and every TrainingJob against
   the CRD's OpenAPI v3 schema (types, required, enum, minimum/maximum,
   minLength, pruning of unknown fields). The CRD itself must be structural and
   its printer columns must point at schema fields.
3. Lists every RBAC rule and fails if any ClusterRole grants secrets (or "*").
4. Self-checks: known-bad TrainingJobs must be rejected by the validator.

Extra arguments are JSON files (a list of objects, e.g. the child objects the
operator renders for a sample job) validated with the same object rules.
"""
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

ERRORS = []


def fail(msg):
    ERRORS.append(msg)
    print(("expected (self-check): " if SELF_CHECK[0] else "FAIL: ") + msg)


SELF_CHECK = [False]


# ---------------------------------------------------------------- renderer --

CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
                  "PriorityClass", "StorageClass", "PersistentVolume"}


def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def smp_merge(base, patch):
    """Strategic-merge subset: maps merge recursively, lists of maps with a
    `name` key merge by name, other lists are replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = smp_merge(out[k], v)
            else:
                out[k] = copy.deepcopy(v)
        return out
    if (isinstance(base, list) and isinstance(patch, list) and
            all(isinstance(x, dict) and "name" in x for x in base + patch)):
        out = [copy.deepcopy(x) for x in base]
        for p in patch:
            for i, b in enumerate(out):
                if b["name"] == p["name"]:
                    out[i] = smp_merge(b, p)
                    break
            else:
                out.append(copy.deepcopy(p))
        return out
    return copy.deepcopy(patch)


def split_image(image):
    # name[:tag][@digest]; a ':' after the last '/' is the tag.
    if "@" in image:
        return image.split("@", 1)[0], None
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        return image[:colon], image[colon + 1:]
    return image, None


def apply_images(obj, images):
    def visit(node):
        if isinstance(node, dict):
            for key in ("containers", "initContainers"):
                if isinstance(node.get(key), list):
                    for c in node[key]:
                        if isinstance(c, dict) and isinstance(c.get("image"), str):
                            name, tag = split_image(c["image"])
                            for im in images:
                                if im["name"] == name:
                                    new_name = im.get("newName", name)
                                    new_tag = im.get("newTag", tag)
                                    c["image"] = new_name + (":" + str(new_tag) if new_tag else "")
            for v in node.values():
                visit(v)
        elif isinstance(node, list):
            for v in node:
                visit(v)
    if obj.get("kind") != "CustomResourceDefinition":
        visit(obj)


def render(kdir):
    with open(os.path.join(kdir, "kustomization.yaml")) as f:
        k = yaml.safe_load(f)
    allowed = {"apiVersion", "kind", "namespace", "resources", "bases", "images",
               "patchesStrategicMerge"}
    for key in k:
        if key not in allowed:
            raise ValueError("%s: kustomization key %r is outside the renderer's subset" % (kdir, key))
    objs = []
    for entry in (k.get("bases") or []) + (k.get("resources") or []):
        p = os.path.normpath(os.path.join(kdir, entry))
        objs.extend(render(p) if os.path.isdir(p) else load_docs(p))
    for entry in k.get("patchesStrategicMerge") or []:
        for patch in load_docs(os.path.join(kdir, entry)):
            for i, o in enumerate(objs):
                if o["kind"] == patch["kind"] and o["metadata"]["name"] == patch["metadata"]["name"]:
                    objs[i] = smp_merge(o, patch)
                    break
            else:
                raise ValueError("%s: patch %s matches no object" % (kdir, entry))
    if k.get("images"):
        for o in objs:
            apply_images(o, k["images"])
    ns = k.get("namespace")
    if ns:
        for o in objs:
            if o["kind"] not in CLUSTER_SCOPED:
                o.setdefault("metadata", {})["namespace"] = ns
    return objs


def key(o):
    m = o.get("metadata", {})
    return (o.get("kind"), m.get("namespace", ""), m.get("name"))


def normalize(node):
    """Lists of named maps compare as sets: strategic merge may reorder them."""
    if isinstance(node, dict):
        return {k: normalize(v) for k, v in node.items()}
    if isinstance(node, list):
        items = [normalize(v) for v in node]
        if items and all(isinstance(x, dict) and "name" in x for x in items):
            items.sort(key=lambda x: str(x["name"]))
        return items
    return node


def kubectl_render(kdir):
    if not shutil.which("kubectl"):
        fail("kubectl not found on PATH (scripts/setup.sh installs kubernetes-client)")
        return None
    try:
        r = subprocess.run(["kubectl", "kustomize", kdir], capture_output=True, text=True, timeout=60)
    except Exception as e:  # noqa: BLE001
        fail("kubectl kustomize %s: %s" % (kdir, e))
        return None
    if r.returncode != 0:
        fail("kubectl kustomize %s: %s" % (kdir, r.stderr.strip()))
        return []
    return [d for d in yaml.safe_load_all(r.stdout) if d is not None]


# -------------------------------------------------------------- validators --

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# Kinds whose names must be DNS-1123 labels (63 chars, no dots).
LABEL_NAMED = {"Service", "Namespace"}


def check_labels(where, labels):
    for k, v in (labels or {}).items():
        prefix, _, name = k.rpartition("/")
        if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
            fail("%s: label key %r: bad prefix" % (where, k))
        if not name or len(name) > 63 or not LABEL_NAME.match(name):
            fail("%s: label key %r: bad name" % (where, k))
        if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.match(v):
            fail("%s: label %s value %r is not a valid label value" % (where, k, v))


def selector_matches(selector, labels):
    return all((labels or {}).get(k) == v for k, v in (selector or {}).items())


def pod_templates(o):
    """(where, labels) of pods this object makes."""
    kind = o.get("kind")
    if kind == "Pod":
        return [(o["metadata"].get("labels") or {})]
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        return [(o["spec"]["template"]["metadata"].get("labels") or {})]
    return []


def check_object(o, rendering):
    if not isinstance(o, dict) or "apiVersion" not in o or "kind" not in o:
        fail("object without apiVersion/kind: %r" % (o,))
        return
    m = o.get("metadata") or {}
    where = "%s/%s" % (o["kind"], m.get("name"))
    name = m.get("name", "")
    rx = DNS1123_LABEL if o["kind"] in LABEL_NAMED else DNS1123_SUBDOMAIN
    limit = 63 if o["kind"] in LABEL_NAMED else 253
    if not name or len(name) > limit or not rx.match(name):
        fail("%s: name %r is not a DNS-1123 %s" % (where, name,
                                                    "label" if limit == 63 else "subdomain"))
    if o["kind"] == "Pod" and len(name) > 63:
        fail("%s: pod name longer than 63 (hostname)" % where)
    ns = m.get("namespace")
    if ns is not None and not DNS1123_LABEL.match(ns):
        fail("%s: namespace %r" % (where, ns))
    check_labels(where, m.get("labels"))
    for ann in (m.get("annotations") or {}):
        prefix, _, n = ann.rpartition("/")
        if not LABEL_NAME.match(n) or (prefix and not DNS1123_SUBDOMAIN.match(prefix)):
            fail("%s: annotation key %r" % (where, ann))
    if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"):
        sel = (o["spec"].get("selector") or {}).get("matchLabels")
        tl = o["spec"]["template"]["metadata"].get("labels") or {}
        check_labels(where + " template", tl)
        if not sel:
            fail("%s: no spec.selector.matchLabels" % where)
        elif not selector_matches(sel, tl):
            fail("%s: selector %r does not match template labels %r" % (where, sel, tl))
    if o["kind"] == "Service":
        sel = o["spec"].get("selector")
        if sel:
            pods = [lab for r in rendering for lab in pod_templates(r)
                    if (r["metadata"].get("namespace") or "") == (ns or "")]
            if not any(selector_matches(sel, lab) for lab in pods):
                fail("%s: selector %r matches no pod in the rendering" % (where, sel))
        for p in o["spec"].get("ports") or []:
            if "name" in p and not DNS1123_LABEL.match(p["name"]):
                fail("%s: port name %r" % (where, p["name"]))
    for lab in pod_templates(o):
        check_labels(where + " pod", lab)
    for spec in pod_specs(o):
        names = [c.get("name") for c in spec.get("containers") or []]
        if not names:
            fail("%s: pod without containers" % where)
        for n in names:
            if not n or not DNS1123_LABEL.match(n):
                fail("%s: container name %r" % (where, n))
        if len(set(names)) != len(names):
            fail("%s: duplicate container names" % where)
        for c in spec.get("containers") or []:
            if not c.get("image"):
                fail("%s: container %s has no image" % (where, c.get("name")))


def pod_specs(o):
    if o.get("kind") == "Pod":
        return [o.get("spec") or {}]
    if o.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        return [o["spec"]["template"].get("spec") or {}]
    return []


# OpenAPI v3 subset as used by structural CRD schemas.
def validate_schema(value, schema, path, errs):
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, (int, str)) and not isinstance(value, bool)):
            errs.append("%s: expected an integer or a string, got %r" % (path, value))
        return
    t = schema.get("type")
    if t == "object":
        if not isinstance(value, dict):
            errs.append("%s: expected an object, got %r" % (path, value))
            return
        for r in schema.get("required") or []:
            if r not in value:
                errs.append("%s.%s: required" % (path, r))
        props = schema.get("properties")
        addl = schema.get("additionalProperties")
        for k, v in value.items():
            if props is not None and k in props:
                validate_schema(v, props[k], path + "." + k, errs)
            elif isinstance(addl, dict):
                validate_schema(v, addl, path + "." + k, errs)
            elif props is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
                # Unknown fields would be pruned silently by the API server: a
                # typo in a manifest. Treat as an error.
                errs.append("%s.%s: unknown field (would be pruned)" % (path, k))
    elif t == "array":
        if not isinstance(value, list):
            errs.append("%s: expected an array" % path)
            return
        for i, v in enumerate(value):
            validate_schema(v, schema.get("items") or {}, "%s[%d]" % (path, i), errs)
    elif t == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            errs.append("%s: expected an integer, got %r" % (path, value))
            return
    elif t == "number":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            errs.append("%s: expected a number, got %r" % (path, value))
            return
    elif t == "string":
        if not isinstance(value, str):
            errs.append("%s: expected a string, got %r" % (path, value))
            return
        if "minLength" in schema and len(value) < schema["minLength"]:
            errs.append("%s: shorter than %d" % (path, schema["minLength"]))
    elif t == "boolean":
        if not isinstance(value, bool):
            errs.append("%s: expected a boolean, got %r" % (path, value))
            return
    if "enum" in schema and value not in schema["enum"]:
        errs.append("%s: %r not one of %r" % (path, value, schema["enum"]))
    if "minimum" in schema and isinstance(value, (int, float)) and value < schema["minimum"]:
        errs.append("%s: %r below minimum %r" % (path, value, schema["minimum"]))
    if "maximum" in schema and isinstance(value, (int, float)) and value > schema["maximum"]:
        errs.append("%s: %r above maximum %r" % (path, value, schema["maximum"]))


def check_structural(schema, path):
    if schema.get("x-kubernetes-int-or-string") or schema.get("x-kubernetes-preserve-unknown-fields") and "type" not in schema:
        return
    if "type" not in schema:
        fail("CRD schema %s: no type (not structural)" % (path or "."))
    for k, sub in (schema.get("properties") or {}).items():
        check_structural(sub, path + "." + k)
    if isinstance(schema.get("additionalProperties"), dict):
        check_structural(schema["additionalProperties"], path + ".*")
    if "items" in schema:
        check_structural(schema["items"], path + "[]")


def schema_at(schema, json_path):
    node = schema
    for part in json_path.strip(".").split("."):
        props = node.get("properties") or {}
        if part == "metadata" and part in props:
            return props[part]
        if part not in props:
            return None
        node = props[part]
    return node


def crd_schema(objs):
    crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    for c in crds:
        if c["metadata"]["name"] != "trainingjobs.loom.dev":
            continue
        v = [v for v in c["spec"]["versions"] if v["name"] == "v1"]
        if not v:
            fail("CRD trainingjobs.loom.dev has no v1")
            return None
        v = v[0]
        if "status" not in (v.get("subresources") or {}):
            fail("CRD: no status subresource")
        schema = v["schema"]["openAPIV3Schema"]
        check_structural(schema, "")
        cols = {col["name"]: col for col in v.get("additionalPrinterColumns") or []}
        for want in ("State", "Age", "Progress"):
            if want not in cols:
                fail("CRD: no printer column %s" % want)
        for col in cols.values():
            if schema_at(schema, col["jsonPath"]) is None:
                fail("CRD: printer column %s: %s is not in the schema" % (col["name"], col["jsonPath"]))
        return schema
    return None


def validate_trainingjob(o, schema):
    errs = []
    validate_schema(o, schema, "", errs)
    return errs


def rbac_rules(objs):
    print("RBAC rules:")
    for o in objs:
        if o["kind"] not in ("Role", "ClusterRole"):
            continue
        scope = o["metadata"].get("namespace", "<cluster>")
        for r in o.get("rules") or []:
            print("  %-11s %-14s %-40s %s" % (o["kind"], scope,
                                             ",".join((g or '""') for g in r.get("apiGroups", [])) + "/" +
                                             ",".join(r.get("resources", [])),
                                             ",".join(r.get("verbs", []))))
            if o["kind"] == "ClusterRole" and any(x in ("secrets", "*") for x in r.get("resources", [])):
                fail("ClusterRole %s grants %s cluster-wide" % (o["metadata"]["name"], r.get("resources")))
    for o in objs:
        if o["kind"] == "ClusterRoleBinding":
            ref = o["roleRef"]["name"]
            for cr in objs:
                if cr["kind"] == "ClusterRole" and cr["metadata"]["name"] == ref:
                    for r in cr.get("rules") or []:
                        if "secrets" in r.get("resources", []):
                            fail("ClusterRoleBinding %s binds secrets access" % o["metadata"]["name"])
        if o["kind"] == "RoleBinding" and o["roleRef"]["kind"] == "ClusterRole":
            print("  note: RoleBinding %s binds ClusterRole %s namespaced" % (o["metadata"]["name"], o["roleRef"]["name"]))


def self_check(schema, good):
    """The validator must reject known-bad objects (not vacuous)."""
    bad_cases = [
        ("numNodes 0", lambda o: o["spec"].__setitem__("numNodes", 0)),
        ("cleanPodPolicy Sometimes", lambda o: o["spec"].setdefault("runPolicy", {}).__setitem__("cleanPodPolicy", "Sometimes")),
        ("no job", lambda o: o["spec"].pop("job")),
        ("numNodes string", lambda o: o["spec"].__setitem__("numNodes", "2")),
        ("typo in spec", lambda o: o["spec"].__setitem__("numNode", 2)),
        ("typo in job.train", lambda o: o["spec"]["job"].setdefault("train", {}).__setitem__("stpes", 3)),
        ("bad family", lambda o: o["spec"]["job"]["model"].__setitem__("family", "bert")),
        ("zero_stage 4", lambda o: o["spec"]["job"].setdefault("parallel", {}).__setitem__("zero_stage", 4)),
        ("suspend string", lambda o: o["spec"].setdefault("runPolicy", {}).__setitem__("suspend", "yes")),
    ]
    for what, mutate in bad_cases:
        o = copy.deepcopy(good)
        mutate(o)
        if not validate_trainingjob(o, schema):
            fail("self-check: validator accepted a TrainingJob with %s" % what)
    n = len(ERRORS)
    SELF_CHECK[0] = True
    check_object({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "Bad_Name"},
                  "spec": {"selector": {"app": "nothing"}}}, [])
    check_object({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                  "spec": {"selector": {"matchLabels": {"a": "b"}},
                           "template": {"metadata": {"labels": {"a": "c"}},
                                        "spec": {"containers": [{"name": "x", "image": "i"}]}}}}, [])
    caught = len(ERRORS) - n
    SELF_CHECK[0] = False
    del ERRORS[n:]
    if caught < 3:
        fail("self-check: object rules caught %d of 3 planted errors" % caught)
    else:
        print("self-check: object rules caught the planted errors (messages above are expected)")


def main():
    # Bazel runfiles are symlinks, which kustomize refuses: work on a copy.
    tmp = tempfile.mkdtemp(prefix="loom-deploy-", dir=os.environ.get("TEST_TMPDIR"))
    deploy = os.path.join(tmp, "deploy")
    shutil.copytree(sys.argv[1], deploy, symlinks=False,
                    ignore=shutil.ignore_patterns("operator", "test", "*.bazel"))
    kdirs = [os.path.join(deploy, "base")] + sorted(
        os.path.join(deploy, "overlays", d) for d in os.listdir(os.path.join(deploy, "overlays")))
    schema = None
    sample = None
    kubectl_used = False
    for kdir in kdirs:
        objs = render(kdir)
        print("== %s: %d objects (own renderer)" % (kdir, len(objs)))
        for o in objs:
            print("   %s %s/%s" % (o["kind"], o["metadata"].get("namespace", "-"), o["metadata"]["name"]))
        keys = [key(o) for o in objs]
        if len(set(keys)) != len(keys):
            fail("%s: duplicate objects" % kdir)
        kc = kubectl_render(kdir)
        if kc is not None:
            kubectl_used = True
            mine = {key(o): o for o in objs}
            theirs = {key(o): o for o in kc}
            if set(mine) != set(theirs):
                fail("%s: kubectl kustomize renders %s, we render %s" % (kdir, sorted(theirs), sorted(mine)))
            for k in mine:
                if k in theirs and normalize(mine[k]) != normalize(theirs[k]):
                    fail("%s: %s differs between kubectl kustomize and our renderer:\n%s\n%s" %
                         (kdir, k, json.dumps(theirs[k], sort_keys=True), json.dumps(mine[k], sort_keys=True)))
        s = crd_schema(objs)
        if s is not None:
            schema = s
        if schema is None:
            fail("%s: no TrainingJob CRD rendered" % kdir)
            continue
        for o in objs:
            check_object(o, objs)
            if o["kind"] == "TrainingJob":
                if o["apiVersion"] != "loom.dev/v1":
                    fail("%s: TrainingJob apiVersion %s" % (kdir, o["apiVersion"]))
                errs = validate_trainingjob(o, schema)
                for e in errs:
                    fail("%s: TrainingJob %s: %s" % (kdir, o["metadata"]["name"], e))
                if not errs:
                    print("   TrainingJob %s validates against the CRD schema" % o["metadata"]["name"])
                sample = o
        rbac_rules(objs)
    print("kubectl kustomize: %s" % ("used, renderings equal ours" if kubectl_used and not ERRORS
                                     else "used" if kubectl_used else "not run (see the failures above)"))
    if sample is None:
        fail("no sample TrainingJob in any overlay")
    else:
        self_check(schema, sample)
    for extra in sys.argv[2:]:
        with open(extra) as f:
            objs = json.load(f)
        print("== %s: %d objects" % (extra, len(objs)))
        for o in objs:
            print("   %s %s" % (o["kind"], o["metadata"]["name"]))
            check_object(o, objs)
            if o["kind"] == "TrainingJob":
                for e in validate_trainingjob(o, schema):
                    fail("%s: %s" % (extra, e))
    if ERRORS:
        print("%d error(s)" % len(ERRORS))
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
