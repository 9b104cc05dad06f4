// Builds the web console into one directory that strand-api embeds (cmake/embed_ui.cmake):
//   node build.mjs [--outdir DIR]      (default: dist/)
// index.html (never cached) names app-<hash>.js and app-<hash>.css (cached for good), so a
// new strand-api build never serves a stale script; each file has a gzipped twin
// (<name>.gz). No source maps, nothing external.
import * as esbuild from 'esbuild';
import { mkdirSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { dirname, join, basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const here = dirname(fileURLToPath(import.meta.url));
const i = process.argv.indexOf('--outdir');
const outdir = i > 0 ? process.argv[i + 1] : join(here, 'dist');
rmSync(outdir, { recursive: true, force: true });
mkdirSync(outdir, { recursive: true });

const result = await esbuild.build({
  entryPoints: { app: join(here, 'src/main.js') },
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['es2020'],
  entryNames: '[name]-[hash]',
  outdir,
  metafile: true,
  logLevel: 'warning',
  legalComments: 'none',
});
const outputs = Object.keys(result.metafile.outputs).map((p) => basename(p));
const js = outputs.find((f) => f.endsWith('.js'));
const css = outputs.find((f) => f.endsWith('.css'));
const html = readFileSync(join(here, 'src/index.html'), 'utf8')
  .replace('%APP_JS%', `/ui/${js}`)
  .replace('%APP_CSS%', `/ui/${css}`);
writeFileSync(join(outdir, 'index.html'), html);

// Each file also gzipped (<name>.gz): strand-api sends it to browsers that accept gzip.
let raw = 0, gz = 0;
for (const f of [js, css, 'index.html']) {
  const b = readFileSync(join(outdir, f));
  const z = gzipSync(b, { level: 9 });
  writeFileSync(join(outdir, f + '.gz'), z);
  raw += b.length;
  gz += z.length;
}
console.log(`web console: ${js}, ${css}, index.html: ${raw} bytes, ${gz} bytes gzipped`);
