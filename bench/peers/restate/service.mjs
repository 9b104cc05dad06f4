// Restate equivalents of strand-bench W1 and W2 (TypeScript SDK, plain ES module so no
// build step is needed). Listens on RESTATE_SERVICE_PORT; bench/peers/restate/run.sh
// registers it with the restate-server it starts.
//   w1: a workflow of three ctx.run steps (each journaled by the server); returns the
//       time taken at the end of the last step.
//   w2: a workflow that awaits the durable promise "go"; the shared handler `go`
//       resolves it (the external signal). Returns the time taken right after it resumed.
//   t3: a workflow that sleeps on a durable timer (ctx.sleep) until the due time in its
//       input, then returns the time taken right after the sleep returned.
import * as restate from "@restatedev/restate-sdk";

const w1 = restate.workflow({
  name: "w1",
  handlers: {
    run: async (ctx, input) => {
      const x = await ctx.run("a", () => input.i + 1);
      const y = await ctx.run("b", () => x * 2);
      return await ctx.run("c", () => ({ y, t_end: Date.now() }));
    },
  },
});

const w2 = restate.workflow({
  name: "w2",
  handlers: {
    run: async (ctx) => {
      const got = await ctx.promise("go");
      const t = await ctx.run("resumed", () => Date.now());
      return { got, t_resumed: t };
    },
    go: async (ctx, payload) => {
      await ctx.promise("go").resolve(payload);
    },
  },
});

const t3 = restate.workflow({
  name: "t3",
  handlers: {
    run: async (ctx, input) => {
      const now = await ctx.date.now();
      await ctx.sleep(Math.max(1, input.due - now));
      return await ctx.run("fired", () => ({ t_fired: Date.now(), t_set: now }));
    },
  },
});

const port = Number(process.env.RESTATE_SERVICE_PORT || 9080);
restate.endpoint().bind(w1).bind(w2).bind(t3).listen(port);
