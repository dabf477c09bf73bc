// A client of tockd for Node.js 18 or later, with no dependency, that knows none of tockd's
// paths: it loads the server's OpenAPI document (GET /openapi.json) and calls its operations by
// operationId, so that it follows the document the server serves.
//
// As a library:
//
//	import { connect } from './tock.mjs';
//	const tock = await connect('http://127.0.0.1:7070', { token: process.env.TOCK_TOKEN });
//	const { body } = await tock.call('put', { params: { topic: 'jobs' }, body: { payload: { n: 1 }, delay: '10s' } });
//
// As a program, it puts a message on a topic, receives it, extends its lease and acks it, and
// prints each exchange as a line of JSON:
//
//	node api/clients/tock.mjs http://127.0.0.1:7070 jobs
//
// An error answer is thrown as an Error with the status, the document's error code and the
// body. An answer whose status the document does not list for the operation is thrown too.

import { pathToFileURL } from 'node:url';

export async function connect(baseURL, { token } = {}) {
  const res = await fetch(new URL('/openapi.json', baseURL));
  if (!res.ok) {
    throw new Error(`GET /openapi.json: ${res.status} ${await res.text()}`);
  }
  const doc = await res.json();
  const operations = new Map();
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (op && op.operationId) {
        operations.set(op.operationId, { method: method.toUpperCase(), path, responses: op.responses ?? {} });
      }
    }
  }

  // call sends the operation named operationId: params fill its path's {names}, query its query
  // string, and body, if given, is sent as JSON. It resolves to { status, body }.
  async function call(operationId, { params = {}, query = {}, body } = {}) {
    const op = operations.get(operationId);
    if (!op) {
      throw new Error(`${baseURL} has no operation "${operationId}" in its /openapi.json`);
    }
    const path = op.path.replace(/\{([^}]+)\}/g, (_, name) => {
      if (!(name in params)) {
        throw new Error(`${operationId}: path parameter "${name}" missing`);
      }
      return encodeURIComponent(String(params[name]));
    });
    const url = new URL(path, baseURL);
    for (const [k, v] of Object.entries(query)) {
      url.searchParams.set(k, String(v));
    }
    const headers = {};
    if (token) {
      headers.authorization = `Bearer ${token}`;
    }
    let data;
    if (body !== undefined) {
      headers['content-type'] = 'application/json';
      data = JSON.stringify(body);
    }
    const res = await fetch(url, { method: op.method, headers, body: data });
    const text = await res.text();
    const json = (res.headers.get('content-type') ?? '').startsWith('application/json');
    const value = text === '' ? null : json ? JSON.parse(text) : text;
    if (!(String(res.status) in op.responses)) {
      throw new Error(`${operationId}: status ${res.status} is not one /openapi.json lists: ${text}`);
    }
    if (!res.ok) {
      const err = new Error(`${operationId}: ${res.status} ${value?.code}: ${value?.error}`);
      Object.assign(err, { status: res.status, code: value?.code, body: value });
      throw err;
    }
    return { status: res.status, body: value };
  }

  return { doc, operations, call };
}

// demo puts a message on topic, receives it, extends its lease and acks it, printing each step.
async function demo(baseURL, topic) {
  const tock = await connect(baseURL, { token: process.env.TOCK_TOKEN });
  const show = (step, r) => console.log(JSON.stringify({ step, status: r.status, body: r.body }));
  const payload = { from: 'node', at: new Date().toISOString() };

  const put = await tock.call('put', { params: { topic }, body: { payload } });
  show('put', put);
  const got = await tock.call('receive', { params: { topic }, body: { max: 1, wait: '10s', visibility: '30s' } });
  show('receive', got);
  const [d] = got.body.messages;
  if (!d || d.id !== put.body.id) {
    throw new Error(`received ${JSON.stringify(got.body)}, not message ${put.body.id}`);
  }
  show('extend', await tock.call('extend', { body: { receipt: d.receipt, visibility: '2m' } }));
  show('ack', await tock.call('ack', { body: { receipts: [d.receipt] } }));
  try {
    await tock.call('cancel', { params: { id: d.id } });
    throw new Error(`message ${d.id} could still be cancelled after its ack`);
  } catch (err) {
    if (err.code !== 'not_found') {
      throw err;
    }
    show('cancel', { status: err.status, body: err.body });
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [baseURL, topic = 'jobs'] = process.argv.slice(2);
  if (!baseURL) {
    console.error('usage: node tock.mjs <base URL of tockd> [topic]   (the token, if any, in TOCK_TOKEN)');
    process.exit(2);
  }
  demo(baseURL, topic).catch((err) => {
    console.error(err.message);
    process.exit(1);
  });
}
