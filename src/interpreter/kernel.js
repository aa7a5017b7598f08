// brig's JavaScript kernel (docs/interpreter.md): run by a JavaScript context of the Python
// kernel (kernel.py), never by hand. It reads {"code": "..."} lines on stdin and answers each
// on the descriptor $BRIG_RESULTS_FD with `result` and `error` messages, then
// {"type": "done"}.
//
// Code runs through Node's REPL evaluator, so cells share one global scope (`let` and
// `const` persist between cells), top-level `await` works, modules load with `require` or
// `await import(...)`, and the last expression's value is the result. console output goes to
// stdout and stderr, which the context relays.
'use strict';
const fs = require('fs');
const readline = require('readline');
const repl = require('repl');
const { PassThrough } = require('stream');
const util = require('util');

const server = repl.start({
  input: new PassThrough(),
  output: new PassThrough(),
  terminal: false,
  useGlobal: true,
  breakEvalOnSigint: true, // an interrupt stops synchronous code
  prompt: '',
});
process.on('SIGINT', () => {}); // interrupts are for the running cell, not for the kernel

const results = Number(process.env.BRIG_RESULTS_FD);
delete process.env.BRIG_RESULTS_FD;

function send(message) {
  fs.writeSync(results, JSON.stringify(message) + '\n');
}

function bundle(value) {
  const data = { 'text/plain': util.inspect(value, { depth: 4, maxArrayLength: 200 }) };
  if (value !== null && typeof value === 'object' && !Array.isArray(value) &&
      Object.getPrototypeOf(value) === Object.prototype) {
    try {
      data['application/json'] = JSON.parse(JSON.stringify(value));
    } catch (e) { /* not JSON: text only */ }
  }
  return data;
}

function sendError(error) {
  send({ type: 'error', name: (error && error.name) || 'Error',
         value: (error && error.message) || String(error),
         traceback: String((error && error.stack) || error).split('\n') });
}

// The cell being evaluated: its callback, or an exception thrown by the cell, ends it. (The
// REPL reports what a cell throws through its domain, not through the eval callback.)
let pending = null;
function finish() {
  const done = pending;
  pending = null;
  if (done) done();
}
server._domain.prependListener('error', (error) => {
  if (!pending) return;
  sendError(error);
  finish();
});

function run(code) {
  return new Promise((done) => {
    pending = done;
    server.eval(code, server.context, 'cell.js', (error, value) => {
      if (!pending) return;
      if (error) {
        sendError(error);
      } else if (value !== undefined) {
        send({ type: 'result', data: bundle(value), main: true });
      }
      finish();
    });
  });
}

const lines = readline.createInterface({ input: process.stdin });
let queue = Promise.resolve();
lines.on('line', (line) => {
  let request;
  try {
    request = JSON.parse(line);
  } catch (e) {
    return;
  }
  queue = queue.then(() => run(String(request.code || ''))).then(() => send({ type: 'done' }));
});
lines.on('close', () => process.exit(0));
