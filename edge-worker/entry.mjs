// The worker's entry module: a WorkerEntrypoint whose fetch hands the request, the bindings and the
// execution context to the Rust handler (`#[event(fetch)]` in src/lib.rs, exported by the wasm-bindgen
// glue that build.sh writes to build/). Wrangler bundles the glue and the .wasm it imports.
import { WorkerEntrypoint } from "cloudflare:workers";
import * as glue from "./build/index.js";
// The small-embedding table (distil-edge-table, copied in by build.sh): a Data module, i.e. an
// ArrayBuffer, which the Rust side parses once per isolate (src/hot_set_sync.rs).
import edgeTable from "./build/edge-table.bin";

globalThis.MESH_EDGE_TABLE = new Uint8Array(edgeTable);

export default class EdgeWorker extends WorkerEntrypoint {
  async fetch(request) {
    return await glue.fetch(request, this.env, this.ctx);
  }
}
