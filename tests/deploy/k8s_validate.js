#!/usr/bin/env node
// Validates rendered Kubernetes objects: the built-in kinds against the Kubernetes OpenAPI
// schemas of npm's kubernetes-models (tests/deploy/node_modules, scripts/setup.sh installs it),
// the custom resources against tests/deploy/crds/*.json (README.md there says where they come
// from).  Reads helmrender's JSON ({"documents": [{"source", "object"}]}) from the files given,
// prints one JSON line per file: {"file", "errors": ["source kind/name: message", ...]}.
// Exit status: 0 = all valid, 1 = some invalid, 3 = kubernetes-models is not installed.
"use strict";
const fs = require("fs");
const path = require("path");

const here = __dirname;
let Ajv;
try {
  require.resolve("kubernetes-models/apps/v1/Deployment", { paths: [here] });
  Ajv = require(require.resolve("ajv", { paths: [here] }));
} catch (e) {
  console.error("kubernetes-models is not installed in tests/deploy/node_modules: " + e.message);
  process.exit(3);
}

const ajv = new (Ajv.default || Ajv)({ allErrors: true, strict: false });
const crds = {};
for (const f of fs.readdirSync(path.join(here, "crds"))) {
  if (!f.endsWith(".json")) continue;
  const schema = JSON.parse(fs.readFileSync(path.join(here, "crds", f), "utf8"));
  const [group, version, kind] = f.replace(/\.json$/, "").split("_");
  crds[`${group}/${version}/${kind}`] = ajv.compile(schema);
}

function modelClass(apiVersion, kind) {
  // "v1" -> kubernetes-models/v1/Kind; "apps/v1" -> kubernetes-models/apps/v1/Kind
  const mod = `kubernetes-models/${apiVersion}/${kind}`;
  let m;
  try {
    m = require(require.resolve(mod, { paths: [here] }));
  } catch (e) {
    return null;
  }
  return m[kind] || m.default;
}

function validate(obj) {
  const { apiVersion, kind } = obj;
  if (typeof apiVersion !== "string" || typeof kind !== "string") return ["apiVersion and kind are required"];
  const crd = crds[`${apiVersion}/${kind}`];
  if (crd) {
    if (crd(obj)) return [];
    return crd.errors.map((e) => `${e.instancePath || "/"} ${e.message}${e.params && e.params.additionalProperty ? ` (${e.params.additionalProperty})` : ""}`);
  }
  const Model = modelClass(apiVersion, kind);
  if (!Model) return [`no schema for ${apiVersion} ${kind} (neither kubernetes-models nor tests/deploy/crds)`];
  try {
    new Model(obj).validate();
    return [];
  } catch (e) {
    if (Array.isArray(e.errors)) return e.errors.map((x) => `${x.instancePath || "/"} ${x.message}`);
    return [String(e.message || e)];
  }
}

let bad = false;
for (const file of process.argv.slice(2)) {
  const { documents } = JSON.parse(fs.readFileSync(file, "utf8"));
  const errors = [];
  for (const { source, object } of documents) {
    const id = `${source} ${object.kind}/${(object.metadata || {}).name}`;
    for (const e of validate(object)) errors.push(`${id}: ${e}`);
  }
  if (errors.length) bad = true;
  console.log(JSON.stringify({ file, objects: documents.length, errors }));
}
process.exit(bad ? 1 : 0);
