// The agent: PID 1 of a long-lived sandbox. It runs inside the sandbox (same namespaces, same
// root file system) and executes what the daemon asks, over the agent protocol
// (protocol/frame.h, docs/agent-protocol.md) on the socket it was handed; it keeps running when
// the daemon goes away, so sandboxes and their processes outlive daemon restarts.
//
// Duties: reap every process (it is PID 1); start commands through the same steps as every
// sandboxed command (engine/command.h); keep each process's output in a bounded ring so that a
// client can re-attach from a byte offset; feed stdin; deliver signals; list processes.
//
// Trust: the agent's only input is its socket, whose path only root on the host can reach.
// The processes it starts are hostile; nothing they do reaches the agent except their output
// and exit. It is non-dumpable and keeps capabilities its commands do not have.
//
// Single-threaded, one epoll loop. Started as `brig agent` by the engine (child.h), never by
// hand.
#pragma once

namespace brig {

// Runs the agent until the sandbox is killed. Returns an exit code only on a fatal start error.
int AgentMain();

}  // namespace brig
