#!/usr/bin/python3
"""docs/config.md and helm/h3pipe/values.schema.json, printed from the config field tables
(common/config/fields.cpp, common/model/config.cpp) by h3pipe_config_gen, and checked.

    config_docs.py write GEN            rewrite both files (after a change to a table or values.yaml)
    config_docs.py check-docs GEN       docs/config.md is what `GEN docs` prints
    config_docs.py check-schema GEN     values.schema.json is what `write` would write
    config_docs.py validate GEN         values.yaml and every values scenario of
                                        tests/deploy/helm_scenarios.py pass the schema, the cluster
                                        configs the loader accepts pass its `cluster` part, and
                                        values that are wrong are refused

GEN: the built generator, build/tests/h3pipe_config_gen.

values.schema.json: the chart's values.  Its `cluster` is the cluster object of the field table
(what users may put there; the chart then sets redis, the roots, the pools and each host's
transfer_port itself).  Every other key is described from values.yaml's own structure: its keys
(a misspelt one is refused), their types (a string also takes a number: Helm reads `tag: 2` as a
number and the chart quotes it), free-form where values.yaml leaves an object empty or passes it
to Kubernetes (resources, nodeSelector, ...).  Stage-time profiles are the table's `profile`.
"""
import difflib
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DOCS = os.path.join(ROOT, "docs", "config.md")
CHART = os.path.join(ROOT, "helm", "h3pipe")
SCHEMA = os.path.join(CHART, "values.schema.json")
WRITE = "/usr/bin/python3 tests/config/config_docs.py write build/tests/h3pipe_config_gen"

# Objects passed to Kubernetes as they are, or maps the user fills: any keys.
FREE = {"resources", "nodeSelector", "tolerations", "affinity", "podSecurityContext",
        "containerSecurityContext", "labels", "passwords", "keys", "annotations"}


def gen(binary, what):
    return subprocess.run([binary, what], check=True, capture_output=True, text=True).stdout


def infer(key, v):
    if key == "profiles":
        return {"type": "object", "additionalProperties": {"$ref": "#/definitions/profile"}}
    if key == "runtime":  # a pool's: {} (the stage's runtime) or a runtime object
        return {"anyOf": [{"type": "object", "maxProperties": 0}, {"$ref": "#/definitions/runtime"}]}
    if key in FREE:
        return {"type": "array"} if isinstance(v, list) else {"type": "object"}
    if isinstance(v, bool):
        return {"type": "boolean"}
    if isinstance(v, int):
        return {"type": "integer"}
    if isinstance(v, float):
        return {"type": "number"}
    if isinstance(v, str):
        return {"type": ["string", "number"]}
    if isinstance(v, list):
        s = {"type": "array"}
        if v:
            s["items"] = infer(key + "[]", v[0])
        return s
    if isinstance(v, dict):
        if not v:
            return {"type": "object"}
        return {"type": "object", "additionalProperties": False,
                "properties": {k: infer(k, x) for k, x in v.items()}}
    return {}


def values_schema(binary):
    import yaml
    with open(os.path.join(CHART, "values.yaml")) as f:
        values = yaml.safe_load(f)
    cluster = json.loads(gen(binary, "schema"))
    defs = cluster.pop("definitions")
    cluster.pop("$schema", None)
    cluster.pop("title", None)
    props = {}
    for k, v in values.items():
        props[k] = cluster if k == "cluster" else infer(k, v)
    props.setdefault("cluster", cluster)
    props["global"] = {"type": "object"}  # Helm's, for a parent chart
    return {"$schema": "http://json-schema.org/draft-07/schema#",
            "title": "h3pipe chart values (generated: tests/config/config_docs.py; the cluster part is docs/config.md)",
            "type": "object", "additionalProperties": False, "properties": props, "definitions": defs}


def schema_text(binary):
    return json.dumps(values_schema(binary), indent=2) + "\n"


def differs(name, path, want):
    have = open(path).read() if os.path.exists(path) else ""
    if have == want:
        return False
    diff = difflib.unified_diff(have.splitlines(True), want.splitlines(True),
                                f"{name} (committed)", f"{name} (generated)")
    sys.stdout.writelines(list(diff)[:200])
    print(f"\n{name} is not what the field tables give: run `{WRITE}` and commit it")
    return True


def validate(binary):
    import jsonschema
    import yaml
    sys.path.insert(0, os.path.join(ROOT, "tests", "deploy"))
    import helm_scenarios as hs
    with open(SCHEMA) as f:
        schema = json.load(f)
    check = jsonschema.Draft7Validator(schema)
    jsonschema.Draft7Validator.check_schema(schema)
    bad = []

    def errors(values):
        return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in check.iter_errors(values))

    with open(os.path.join(CHART, "values.yaml")) as f:
        base = yaml.safe_load(f)
    for name, (_, values) in [("values.yaml", ("", {}))] + sorted(hs.SCENARIOS.items()):
        if errs := errors(hs.effective_values(values)):
            bad.append(f"scenario {name}: {errs}")
    cluster = {**schema["properties"]["cluster"], "definitions": schema["definitions"]}
    ccheck = jsonschema.Draft7Validator(cluster)
    for rel in ["configs/local.json", "deploy/cluster.seeds.json"]:
        with open(os.path.join(ROOT, rel)) as f:
            if errs := [e.message for e in ccheck.iter_errors(json.load(f))]:
                bad.append(f"{rel}: {errs}")
    # Values the schema must refuse, each with the pointer it names.
    wrong = {
        "cluster.colour": ({"cluster": {"colour": "red"}}, "cluster"),
        "cluster.queue.lease_ms string": ({"cluster": {"queue": {"lease_ms": "5s"}}}, "cluster/queue/lease_ms"),
        "cluster.queue.max_deliveries 0": ({"cluster": {"queue": {"max_deliveries": 0}}}, "cluster/queue/max_deliveries"),
        "cluster.dispatch": ({"cluster": {"dispatch": "random"}}, "cluster/dispatch"),
        "cluster.stages runtime": ({"cluster": {"stages": {"sample": {"runtime": {"name": "magic"}}}}},
                                   "cluster/stages/sample/runtime/name"),
        "cluster.hosts without name": ({"cluster": {"hosts": [{"address": "10.0.0.1"}]}}, "cluster/hosts/0"),
        "samplerPool (top-level typo)": ({"samplerPool": []}, ""),
        "encoder.gpuz": ({"encoder": {"gpuz": 1}}, "encoder"),
        "decoder profile kind": ({"decoder": {"profiles": {"sd": {"kind": "gamma"}}}}, "decoder/profiles/sd/kind"),
        "keda.enabled string": ({"keda": {"enabled": "yes"}}, "keda/enabled"),
    }
    for name, (values, where) in wrong.items():
        errs = errors(hs.effective_values(values))
        if not any(e.startswith(where + ":") for e in errs):
            bad.append(f"not refused at {where or '/'}: {name} ({errs})")
    for b in bad:
        print(b)
    print(f"{len(hs.SCENARIOS) + 1} values scenarios, 2 cluster configs, {len(wrong)} wrong values: "
          f"{len(bad)} problems")
    return 1 if bad else 0


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    what, binary = sys.argv[1], sys.argv[2]
    if what == "write":
        with open(DOCS, "w") as f:
            f.write(gen(binary, "docs"))
        with open(SCHEMA, "w") as f:
            f.write(schema_text(binary))
        return 0
    if what == "check-docs":
        return 1 if differs("docs/config.md", DOCS, gen(binary, "docs")) else 0
    if what == "check-schema":
        return 1 if differs("helm/h3pipe/values.schema.json", SCHEMA, schema_text(binary)) else 0
    if what == "validate":
        return validate(binary)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
