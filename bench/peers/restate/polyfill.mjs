// The Restate SDK uses Promise.withResolvers (ES2024, Node 22); this machine's Node is
// 20. Loaded with `node --import ./polyfill.mjs` before the SDK; the standard
// definition, nothing else.
if (typeof Promise.withResolvers !== "function") {
  Promise.withResolvers = function withResolvers() {
    let resolve, reject;
    const promise = new this((res, rej) => { resolve = res; reject = rej; });
    return { promise, resolve, reject };
  };
}
