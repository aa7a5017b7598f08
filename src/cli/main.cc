// brig: one executable for the CLI, the daemon (`brig serve`) and the in-sandbox agent.
#include <cstdio>
#include <set>
#include <string>

#include "CLI/CLI.hpp"
#include "agent/agent.h"
#include "cli/commands.h"
#include "engine/sandbox.h"

namespace {

// The index of the "--" that ends the flags of `run` or `exec`, or -1. Scanning stops at the
// first argument that is neither a flag nor a flag's value (nor exec's sandbox id): that is
// where the command starts.
int FindCommandSeparator(int argc, char** argv) {
  static const std::set<std::string> kTakesValue = {
      "--state-dir", "--url",  "--api-key", "--memory", "--cpus",
      "--pids",      "--disk", "--timeout", "--env",    "-e",
      "--workdir",   "-w",     "--user",    "-u",       "--stats-file"};
  std::string subcommand;
  int positionals = 0;  // exec takes the sandbox id before the command
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") return subcommand.empty() ? -1 : i;
    if (arg.rfind("-", 0) == 0) {
      if (kTakesValue.count(arg)) ++i;
      continue;
    }
    if (subcommand.empty() && (arg == "run" || arg == "exec" || arg == "shell")) {
      subcommand = arg;
      continue;
    }
    if (subcommand != "run" && positionals++ == 0) continue;  // exec's and shell's id
    return -1;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"brig: self-hosted sandboxes for AI agents"};
  app.require_subcommand(1);
  std::string state_dir = brig::DefaultStateDir();
  app.add_option("--state-dir", state_dir,
                 "state directory (default $BRIG_STATE_DIR or /var/lib/brig)");

  brig::RunFlags run;
  CLI::App* run_cmd = app.add_subcommand("run", "run one command in a fresh sandbox");
  run_cmd->add_option("--memory", run.memory,
                      "memory limit, e.g. 512M (the writable layer counts)");
  run_cmd->add_option("--cpus", run.cpus, "CPU quota in cores, e.g. 1.5 (default: unlimited)");
  run_cmd->add_option("--pids", run.pids, "maximum processes and threads");
  run_cmd->add_option("--disk", run.disk, "size of the writable layer, e.g. 1G");
  run_cmd->add_option("--timeout", run.timeout, "kill the sandbox after this long, e.g. 30s");
  run_cmd->add_option("--env,-e", run.env, "set an environment variable, K=V (repeatable)");
  run_cmd->add_option("--workdir,-w", run.workdir, "working directory (default: the user's home)");
  run_cmd->add_option("--user,-u", run.user, "user or root");
  run_cmd->add_option("--stats-file", run.stats_file, "write resource usage as JSON to this file");
  // Everything from the first positional argument on (or after "--") is the command.
  run_cmd->prefix_command();

  run_cmd->add_flag("--remote", run.remote,
                    "run through brig serve (a sandbox created and killed for this command)");

  brig::RemoteFlags remote;
  app.add_option("--url", remote.url, "brig serve's URL (default $BRIG_URL, or the state dir's)");
  app.add_option("--api-key", remote.api_key,
                 "API key (default $BRIG_API_KEY, or <state dir>/api-key)");

  brig::ServeFlags serve;
  CLI::App* serve_cmd = app.add_subcommand("serve", "run the daemon: the HTTP API");
  serve_cmd->add_option("--listen", serve.listen, "HOST:PORT to listen on")->capture_default_str();

  brig::CreateFlags create;
  CLI::App* create_cmd = app.add_subcommand("create", "create a long-lived sandbox");
  create_cmd->add_option("--template", create.template_name, "template")->capture_default_str();
  create_cmd->add_option("--name", create.name, "name: create-or-get by this name");
  create_cmd->add_option("--cpus", create.cpus, "CPU quota in cores (default: unlimited)");
  create_cmd->add_option("--memory", create.memory, "memory limit")->capture_default_str();
  create_cmd->add_option("--disk", create.disk, "writable layer size")->capture_default_str();
  create_cmd->add_option("--pids", create.pids, "maximum processes")->capture_default_str();
  create_cmd->add_option("--timeout", create.timeout, "lifetime")->capture_default_str();
  create_cmd->add_option("--env,-e", create.env, "environment for every command, K=V");
  create_cmd->add_option("--meta", create.metadata, "metadata, K=V");
  create_cmd->add_flag("--json", remote.json, "print the sandbox as JSON");

  brig::ListFlags list;
  CLI::App* ls_cmd = app.add_subcommand("ls", "list sandboxes, newest first");
  ls_cmd->add_option("--state", list.state, "only these states, e.g. running,paused");
  ls_cmd->add_option("--meta", list.metadata, "only with this metadata, K=V");
  ls_cmd->add_flag("--json", remote.json, "print JSON");

  brig::ExecFlags exec;
  CLI::App* exec_cmd = app.add_subcommand("exec", "run a command in a sandbox: exec ID -- CMD");
  exec_cmd->add_option("--env,-e", exec.env, "set an environment variable, K=V");
  exec_cmd->add_option("--workdir,-w", exec.workdir, "working directory");
  exec_cmd->add_option("--user,-u", exec.user, "user or root");
  exec_cmd->add_option("--timeout", exec.timeout, "kill the command after this long, e.g. 10s");
  exec_cmd->add_flag("--background", exec.background, "start it and print its pid");
  exec_cmd->add_flag("--json", remote.json, "print JSON (with --background)");
  exec_cmd->prefix_command();

  std::string kill_id;
  CLI::App* kill_cmd = app.add_subcommand("kill", "kill a sandbox");
  kill_cmd->add_option("id", kill_id, "sandbox id")->required();

  std::string timeout_id, timeout_value;
  CLI::App* timeout_cmd =
      app.add_subcommand("timeout", "set a sandbox's remaining lifetime: timeout ID SECONDS");
  timeout_cmd->add_option("id", timeout_id, "sandbox id")->required();
  timeout_cmd->add_option("seconds", timeout_value, "seconds (or 5m, 1h...)")->required();
  timeout_cmd->add_flag("--json", remote.json, "print the sandbox as JSON");

  brig::ShellFlags shell;
  CLI::App* shell_cmd =
      app.add_subcommand("shell", "an interactive terminal in a sandbox: shell ID [-- CMD]");
  shell_cmd->add_option("--workdir,-w", shell.workdir, "working directory");
  shell_cmd->add_option("--user,-u", shell.user, "user or root");
  shell_cmd->prefix_command();

  brig::CodeFlags code;
  CLI::App* code_cmd =
      app.add_subcommand("code", "run code in a sandbox's interpreter: code ID CODE");
  code_cmd->add_option("id", code.id, "sandbox id")->required();
  code_cmd->add_option("code", code.code, "the code (Python)")->required();
  code_cmd->add_option("--context", code.context, "context id (default: the language's default)");
  code_cmd->add_option("--language", code.language, "language")->capture_default_str();
  code_cmd->add_option("--timeout", code.timeout, "interrupt it after this long, e.g. 10s");
  code_cmd->add_flag("--json", remote.json, "print the execution's lines as JSON");

  brig::LogsFlags logs;
  CLI::App* logs_cmd = app.add_subcommand("logs", "print a process's output: logs ID PID");
  logs_cmd->add_option("id", logs.id, "sandbox id")->required();
  logs_cmd->add_option("pid", logs.pid, "process id (in the sandbox)")->required();
  logs_cmd->add_option("--offset", logs.offset, "start at this byte of its output");
  logs_cmd->add_flag("--follow,-f", logs.follow, "keep printing until it exits");

  app.add_subcommand("gc", "remove what crashed one-shot runs left behind");
  // PID 1 of long-lived sandboxes (started by the engine, not by people): hidden.
  app.add_subcommand("agent", "")->group("");
  app.add_subcommand("check", "check that this host can run sandboxes");

  // "brig run [flags] -- CMD ARGS": after run's own flags, a "--" starts the command, which is
  // passed on verbatim (its own "--" included).
  std::vector<std::string> after_dashes;
  int split = FindCommandSeparator(argc, argv);
  if (split > 0) {
    after_dashes.assign(argv + split + 1, argv + argc);
    argc = split;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "brig: %s\n", e.what());
    return brig::kExitBrigError;
  }
  run.state_dir = state_dir;
  remote.state_dir = state_dir;
  if (run_cmd->parsed()) {
    run.command = run_cmd->remaining();
    if (!run.command.empty() && run.command.front().rfind("-", 0) == 0) {
      std::fprintf(stderr, "brig: unknown option %s for run (put the command after --)\n",
                   run.command.front().c_str());
      return brig::kExitBrigError;
    }
    run.command.insert(run.command.end(), after_dashes.begin(), after_dashes.end());
    if (run.remote) return brig::RemoteRunCommand(remote, run);
    return brig::RunCommand(run);
  }
  if (exec_cmd->parsed()) {
    std::vector<std::string> rest = exec_cmd->remaining();
    if (rest.empty()) {
      std::fprintf(stderr, "brig: exec needs a sandbox id: brig exec ID -- CMD ARGS\n");
      return brig::kExitBrigError;
    }
    exec.id = rest.front();
    exec.command.assign(rest.begin() + 1, rest.end());
    exec.command.insert(exec.command.end(), after_dashes.begin(), after_dashes.end());
    return brig::ExecCommand(remote, exec);
  }
  if (shell_cmd->parsed()) {
    std::vector<std::string> rest = shell_cmd->remaining();
    if (rest.empty()) {
      std::fprintf(stderr, "brig: shell needs a sandbox id: brig shell ID [-- CMD ARGS]\n");
      return brig::kExitBrigError;
    }
    shell.id = rest.front();
    shell.command.assign(rest.begin() + 1, rest.end());
    shell.command.insert(shell.command.end(), after_dashes.begin(), after_dashes.end());
    return brig::ShellCommand(remote, shell);
  }
  if (serve_cmd->parsed()) {
    serve.state_dir = state_dir;
    return brig::ServeCommand(serve);
  }
  if (create_cmd->parsed()) return brig::CreateCommand(remote, create);
  if (ls_cmd->parsed()) return brig::ListCommand(remote, list);
  if (kill_cmd->parsed()) return brig::KillCommand(remote, kill_id);
  if (timeout_cmd->parsed()) return brig::TimeoutCommand(remote, timeout_id, timeout_value);
  if (logs_cmd->parsed()) return brig::LogsCommand(remote, logs);
  if (code_cmd->parsed()) return brig::CodeCommand(remote, code);
  if (app.got_subcommand("gc")) return brig::GcCommand(state_dir);
  if (app.got_subcommand("agent")) return brig::AgentMain();
  if (app.got_subcommand("check")) return brig::CheckCommand(state_dir);
  return brig::kExitBrigError;
}
