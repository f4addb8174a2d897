// Builds the page into OUTDIR (default dist): index.html, assets/main.js and assets/main.css,
// bundled by esbuild from src/main.ts, the SDK's sources (../sdk/typescript/src) and xterm.js.
// corrald serves OUTDIR at / (api.web_dir; the CMake build writes it beside corrald).
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { build } from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const outdir = resolve(process.argv[2] ?? join(here, "dist"));
rmSync(join(outdir, "assets"), { recursive: true, force: true });
mkdirSync(join(outdir, "assets"), { recursive: true });
await build({
  entryPoints: { main: join(here, "src", "main.ts") },
  bundle: true,
  format: "esm",
  target: "es2022",
  minify: true,
  sourcemap: "linked",
  outdir: join(outdir, "assets"),
  // The SDK opens the `ws` package only where there is no native WebSocket: never in a browser.
  external: ["ws"],
  logLevel: "warning",
  legalComments: "linked",
});
copyFileSync(join(here, "src", "index.html"), join(outdir, "index.html"));
console.log(`web page built in ${outdir}`);
