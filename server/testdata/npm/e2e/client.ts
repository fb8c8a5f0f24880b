// The end-to-end test of a client generated from the daemon's OpenAPI
// document by tools nobody here wrote: openapi-typescript turns
// /v1/openapi.json into pegasus.d.ts (TestGeneratedClient does, next to
// this file), tsc checks this program against it, and openapi-fetch sends
// its requests to the daemon at $PEGASUS_URL. If the document said
// something the daemon does not do, this fails to compile or to run.
//
// It submits a task and waits for it and lists the tools, models and
// task types (/v1), then registers a worker,
// polls and completes a task (/api/v1), and reads the errors' one shape.
import createClient from "openapi-fetch";
import type { components, paths } from "./pegasus.js";

type ErrorBody = components["schemas"]["Error"];

declare const process: { env: Record<string, string | undefined> }; // node's, without @types/node

const baseUrl = process.env.PEGASUS_URL;
if (!baseUrl) throw new Error("set PEGASUS_URL to the daemon's URL");
const client = createClient<paths>({ baseUrl });

function check(ok: boolean, what: string, got?: unknown): void {
  if (!ok) throw new Error(`${what}${got === undefined ? "" : ": got " + JSON.stringify(got)}`);
}

function expectError(error: ErrorBody | undefined, status: number, want: ErrorBody["error"]["code"], httpStatus: number): ErrorBody {
  check(error !== undefined && httpStatus === status && error.error.code === want, `want ${status} ${want}`, { httpStatus, error });
  return error!;
}

// waitFor repeats a long poll (each waits on the server) until done says
// so, up to a deadline.
async function waitFor<T>(what: string, poll: () => Promise<T>, done: (v: T) => boolean): Promise<T> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const v = await poll();
    if (done(v)) return v;
    check(Date.now() < deadline, `timed out waiting for ${what}`, v);
  }
}

// /v1: submit a task and wait for it.
{
  const { data: created, response } = await client.POST("/v1/tasks", {
    body: { input: "what time is it?", source: "e2e", metadata: { from: "openapi-fetch" } },
  });
  check(response.status === 201 && created !== undefined, "POST /v1/tasks", response.status);
  const id = created!.task_id;
  const task = await waitFor("the task to finish", async () => {
    const { data, error } = await client.GET("/v1/tasks/{id}", { params: { path: { id }, query: { wait: "10s" } } });
    check(data !== undefined, "GET /v1/tasks/{id}", error);
    return data!;
  }, (t) => t.state === "completed" || t.state === "failed");
  check(task.state === "completed" && task.result !== "", "the task completed with a result", task);
  check(task.metadata.from === "openapi-fetch" && task.error === "", "the task's metadata and empty error", task);

  const { data: page } = await client.GET("/v1/tasks", { params: { query: { state: "completed", limit: 10 } } });
  check(page !== undefined && page.tasks.some((t) => t.task_id === id), "GET /v1/tasks lists it", page);

  const missing = await client.GET("/v1/tasks/{id}", { params: { path: { id: "01JABCDEFGHJKMNPQRSTVWXYZ0" } } });
  expectError(missing.error, 404, "not_found", missing.response.status);
  const bad = await client.GET("/v1/tasks", { params: { query: { state: "bogus" } } });
  expectError(bad.error, 400, "bad_request", bad.response.status);
}

// /v1: what the daemon runs with. Without a configuration the lists
// may be empty; each entry has the document's fields.
{
  const tools = await client.GET("/v1/tools");
  check(tools.data !== undefined && Array.isArray(tools.data.tools), "GET /v1/tools", tools.error);
  for (const t of tools.data!.tools) check(typeof t.name === "string" && ["builtin", "go", "mcp", "worker"].includes(t.source), "a tool", t);
  for (const sv of tools.data!.servers) check(["ok", "starting", "down"].includes(sv.health) && typeof sv.tools === "number", "an MCP server", sv);
  const models = await client.GET("/v1/models");
  check(models.data !== undefined && Array.isArray(models.data.models), "GET /v1/models", models.error);
  for (const m of models.data!.models) check(typeof m.probe.ok === "boolean" && typeof m.calls === "number", "a model", m);
  const types = await client.GET("/v1/task-types");
  check(types.data !== undefined && Array.isArray(types.data.task_types), "GET /v1/task-types", types.error);
  for (const t of types.data!.task_types) check(typeof t.version === "string" && Array.isArray(t.tools), "a task type", t);
}

// /api/v1: a client creates a task, a worker registers, polls, completes.
{
  const asClient = { "X-Agent-ID": "e2e-client" };
  const asWorker = { "X-Agent-ID": "e2e-worker" };
  const { data: created, response } = await client.POST("/api/v1/tasks", {
    params: { header: { ...asClient, "Idempotency-Key": "e2e-1" } },
    body: { title: "count the pages", required_capabilities: ["e2e"], metadata: { from: "openapi-fetch" } },
  });
  check(response.status === 201 && created !== undefined && created.status === "pending", "POST /api/v1/tasks", created);
  const id = created!.task_id;

  const { data: worker } = await client.PUT("/api/v1/agents/{id}", {
    params: { path: { id: "e2e-worker" }, header: asWorker },
    body: { capabilities: ["e2e"], max_tasks: 1 },
  });
  check(worker !== undefined && worker.id === "e2e-worker" && worker.alive, "PUT /api/v1/agents/{id}", worker);

  const mine = await waitFor("the assignment", async () => {
    const { data, error } = await client.GET("/api/v1/tasks", {
      params: { header: asWorker, query: { agent: "e2e-worker", status: "assigned", wait: "10s" } },
    });
    check(data !== undefined, "GET /api/v1/tasks (poll)", error);
    return data!.tasks;
  }, (ts) => ts.some((t) => t.task_id === id));
  check(mine[0].assigned_agent === "e2e-worker", "assigned to the worker", mine);

  const progress = await client.POST("/api/v1/tasks/{id}/progress", {
    params: { path: { id }, header: asWorker }, body: { message: "reading" },
  });
  check(progress.data?.status === "in_progress", "POST progress", progress.error ?? progress.data);

  const done = await client.POST("/api/v1/tasks/{id}/complete", {
    params: { path: { id }, header: asWorker }, body: { result: { pages: 42 } },
  });
  check(done.data?.status === "completed", "POST complete", done.error ?? done.data);
  const result = done.data!.result as { pages?: number } | null;
  check(result?.pages === 42 && done.data!.error === "", "the completed task's result", done.data);

  // Another result from the same worker: a conflict that says what stands
  // in the way (the task is completed), not that the worker is not assigned.
  const again = await client.POST("/api/v1/tasks/{id}/complete", {
    params: { path: { id }, header: asWorker }, body: { result: { pages: 43 } },
  });
  const conflict = expectError(again.error, 409, "conflict", again.response.status);
  check(!conflict.error.message.includes("not assigned"), "the conflict's message", conflict);

  const bogus = await client.GET("/api/v1/tasks", { params: { header: asClient, query: { status: "bogus" as "pending" } } });
  expectError(bogus.error, 400, "bad_request", bogus.response.status);
  const noAgent = await client.GET("/api/v1/tasks/{id}", { params: { path: { id }, header: { "X-Agent-ID": "" } } });
  expectError(noAgent.error, 400, "bad_request", noAgent.response.status);
}

console.log("ok");
