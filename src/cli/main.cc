// brig: one executable for the CLI (and, later, the daemon and the in-sandbox agent).
#include <cstdio>
#include <set>
#include <string>

#include "CLI/CLI.hpp"
#include "agent/agent.h"
#include "cli/commands.h"
#include "engine/sandbox.h"

namespace {

// The index of the "--" that ends `run`'s flags, or -1. Scanning stops at the first argument
// that is neither a flag nor a flag's value: that is where the command starts.
int FindCommandSeparator(int argc, char** argv) {
  static const std::set<std::string> kTakesValue = {
      "--state-dir", "--memory",  "--cpus", "--pids", "--disk", "--timeout",   "--env",
      "-e",          "--workdir", "-w",     "--user", "-u",     "--stats-file"};
  bool in_run = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") return in_run ? i : -1;
    if (arg.rfind("-", 0) == 0) {
      if (kTakesValue.count(arg)) ++i;
      continue;
    }
    if (in_run || arg != "run") return -1;
    in_run = true;
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
  if (run_cmd->parsed()) {
    run.command = run_cmd->remaining();
    if (!run.command.empty() && run.command.front().rfind("-", 0) == 0) {
      std::fprintf(stderr, "brig: unknown option %s for run (put the command after --)\n",
                   run.command.front().c_str());
      return brig::kExitBrigError;
    }
    run.command.insert(run.command.end(), after_dashes.begin(), after_dashes.end());
    return brig::RunCommand(run);
  }
  if (app.got_subcommand("gc")) return brig::GcCommand(state_dir);
  if (app.got_subcommand("agent")) return brig::AgentMain();
  if (app.got_subcommand("check")) return brig::CheckCommand(state_dir);
  return brig::kExitBrigError;
}
