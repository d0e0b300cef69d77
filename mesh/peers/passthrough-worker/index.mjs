// The edge benchmark's peer (`mesh bench edge`): a worker that passes every request through to
// UPSTREAM unchanged and returns the answer as it comes, under the same workerd as the edge tier.
export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    return fetch(new Request(env.UPSTREAM + url.pathname + url.search, request));
  },
};
