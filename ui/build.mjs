// Bundles the console (src/main.js: preact + htm) with esbuild into OUT (default ../build/ui):
// index.html, app.js, app.css, which h3pipe-api serves under /ui/ (--ui-dir; docs/console.md).
// Run by the CMake target h3pipe-ui; needs `npm ci` in ui/ (scripts/setup.sh).
import { build } from 'esbuild';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const at = process.argv.indexOf('--out');
const out = path.resolve(at > 0 ? process.argv[at + 1] : path.join(here, '..', 'build', 'ui'));
fs.mkdirSync(out, { recursive: true });
await build({
  entryPoints: [path.join(here, 'src', 'main.js')],
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['es2022'],
  outfile: path.join(out, 'app.js'),
  legalComments: 'eof',
  logLevel: 'warning',
});
for (const f of ['index.html', 'app.css']) fs.copyFileSync(path.join(here, f === 'app.css' ? 'src/app.css' : f), path.join(out, f));
console.log(`h3pipe-ui: ${out}`);
