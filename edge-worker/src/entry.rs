//! The worker's entry point: `#[event(fetch)]` expands to wasm-bindgen glue that contains `unsafe`
//! blocks, so it sits alone here, with the one permission it needs, and hands every request to
//! [`crate::route`].
#![allow(unsafe_code)]

use worker::{event, Context, Env, Request, Response, Result};

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    crate::route(req, env, ctx).await
}
