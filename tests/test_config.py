"""Configuration: precedence, the minutes/seconds pairs, validation that says what to do."""

import os

import pytest
from click.testing import CliRunner

from genesis.cli import cli
from genesis.config import (KNOBS, MAX_CONFIG_BYTES, MAX_PROMPT_BYTES, MAX_VALUE_CHARS, ConfigError, advice,
                            closest, read_prompt, resolve)
from genesis.fleet.resources import fleet_settings
from genesis.procs.memory import auto_cap
from genesis.sandbox.home import Allowed
from genesis.temporal.settings import temporal_settings


def conf(project, text):
    (project / "orchestrator").mkdir(exist_ok=True)
    (project / "orchestrator" / "genesis.conf").write_text(text)


def test_defaults_are_the_documented_ones(project):
    cfg = resolve(project, env={})
    assert (cfg.stale_after, cfg.check_interval, cfg.max_runtime) == (900, 60, 45 * 60)
    assert (cfg.cb_warning, cfg.cb_stop, cfg.pause) == (3, 5, 10)
    assert cfg.agent_cmd == ("claude", "-p", "--dangerously-skip-permissions")
    assert [p.name for p in cfg.phases] == ["Builder", "Criticizer", "Planner"]
    assert cfg.reap_ports == (8080,) and cfg.auto_commit and not cfg.auto_push


def minutes(text):
    return float(text) * 60


def span(text):
    return {"15m": 900, "45m": 2700, "5m": 300, "60s": 60, "30s": 30, "2m": 120}[text]


def yes(text):
    return text == "true"


def words(text):
    return tuple(text.split())


# Each knob with a default: where a Config holds it, and what its documented default means there.
READ = {
    "GENESIS_AGENT_CMD": (lambda c: c.agent_cmd, words),
    "GENESIS_PHASES": (lambda c: tuple(p.name for p in c.phases), words),
    "GENESIS_MAX_ITERATIONS": (lambda c: c.max_iterations, int),
    "ITERATION_PAUSE_SECONDS": (lambda c: c.pause, float),
    "HEARTBEAT_CHECK_INTERVAL": (lambda c: c.check_interval, float),
    "HEARTBEAT_STALE": (lambda c: c.stale_after, span),
    "AGENT_MAX_RUNTIME": (lambda c: c.max_runtime, span),
    "TOOL_SILENT": (lambda c: c.tool_silent, span),
    "AGENT_FIRST_EVENT_WINDOW": (lambda c: c.first_event_window, span),
    "AGENT_RESULT_EXIT_WINDOW": (lambda c: c.result_exit_window, span),
    "AGENT_STREAM_IDLE_WINDOW": (lambda c: c.stream_idle_window, span),
    "TOOL_BUSY_MAX_MINUTES": (lambda c: c.tool_busy_max, minutes),
    "DOOM_SAME_FAILURES": (lambda c: c.doom_limits.same_failures, int),
    "DOOM_CYCLE_CALLS": (lambda c: c.doom_limits.cycle_window, int),
    "DOOM_CYCLE_INPUTS": (lambda c: c.doom_limits.cycle_inputs, int),
    "DOOM_SEVERITY_LADDER": (lambda c: (c.doom_limits.warn, c.doom_limits.medium, c.doom_limits.high,
                                        c.doom_limits.critical), lambda t: tuple(map(int, t.split()))),
    "GENESIS_HEALTH_ENFORCE": (lambda c: c.health_enforce, yes),
    "PHASE_RETRIES": (lambda c: c.phase_retries, int),
    "PHASE_RETRY_DELAY_SECONDS": (lambda c: c.retry_delay, float),
    "GENESIS_MAX_RECOVERIES": (lambda c: c.max_recoveries, int),
    "HEARTBEAT_COUNT_OUTPUT": (lambda c: c.count_output, yes),
    "KILL_GRACE_SECONDS": (lambda c: c.kill_grace, float),
    "CB_WARNING_THRESHOLD": (lambda c: c.cb_warning, int),
    "CB_STOP_THRESHOLD": (lambda c: c.cb_stop, int),
    "AUTO_COMMIT": (lambda c: c.auto_commit, yes),
    "AUTO_PUSH": (lambda c: c.auto_push, yes),
    "GENESIS_COMMIT_KEY": (lambda c: c.commit_key, str),
    "GENESIS_GIT_HOOKS": (lambda c: c.git_hooks, yes),
    "GENESIS_SANDBOX": (lambda c: c.sandbox, str),
    "GENESIS_AGENT_MEMORY_MAX": (lambda c: c.agent_memory_max, lambda d: auto_cap() if d == "auto" else int(d)),
    "GENESIS_AGENT_PIDS_MAX": (lambda c: c.agent_pids_max, int),
    "GENESIS_BOX_ALLOW": (lambda c: c.box_allow, lambda d: ()),
    "GENESIS_NETWORK": (lambda c: c.network, str),
    "GENESIS_NETWORK_ALLOW": (lambda c: c.network_allow, lambda d: ()),
    "GENESIS_ALLOW_HISTORY_REWRITE": (lambda c: c.allow_history_rewrite, yes),
    "GENESIS_UNTRACKED_COPY_MAX_MB": (lambda c: c.untracked_copy_max, lambda t: int(t) << 20),
    "GENESIS_COMMIT_MAX_FILE_MB": (lambda c: c.commit_max_file, lambda t: int(t) << 20),
    "AGENT_LOG_MAX_MB": (lambda c: c.log_max_bytes, lambda t: int(t) << 20),
    "REAP_SCOPE": (lambda c: c.reap_scope, str),
    "REAP_PATTERNS": (lambda c: c.reap_patterns, str),
    "REAP_PORTS": (lambda c: c.reap_ports, lambda t: tuple(map(int, t.split()))),
    "GENESIS_LIMIT_MARGIN_SECONDS": (lambda c: c.limit_margin, float),
    "GENESIS_LIMIT_JITTER_PERCENT": (lambda c: c.limit_jitter, lambda t: float(t) / 100),
    "GENESIS_SHARED_STATE_DIR": (lambda c: c.shared_state_dir, str),
    "GENESIS_MAX_LIMIT_WAIT": (lambda c: c.max_limit_wait, lambda t: float(t.removesuffix("h")) * 3600),
    "GENESIS_BACKOFF_FIRST_SECONDS": (lambda c: c.backoff_first, float),
    "GENESIS_BACKOFF_MAX_SECONDS": (lambda c: c.backoff_max, float),
    "GENESIS_MAX_OUTAGE_MINUTES": (lambda c: c.max_outage, minutes),
    "GENESIS_DONE_WHEN": (lambda c: str(c.done_when), str),
    "GENESIS_MAX_RUNTIME_HOURS": (lambda c: c.max_run_seconds, lambda t: float(t) * 3600),
    "GENESIS_MAX_COST_USD": (lambda c: c.max_cost_usd, float),
    "CB_MAX_TRIALS": (lambda c: c.cb_max_trials, int),
    "GENESIS_FLEET_MAX_TASK_RESTARTS": (lambda c: c.fleet_max_task_restarts, int),
    "GENESIS_FLEET_MAX_FAILED_TASKS": (lambda c: c.fleet_max_failed_tasks, int),
    "GENESIS_FLEET_ESCALATION": (lambda c: c.fleet_escalation, lambda t: tuple(t.split("|"))),
    "GENESIS_FLEET_RESTART_BACKOFF_SECONDS": (lambda c: c.fleet_restart_backoff, float),
    "GENESIS_FLEET_RESTART_EVERY_SECONDS": (lambda c: c.fleet_restart_every, float),
    "GENESIS_FLEET_CASCADE_PERCENT": (lambda c: c.fleet_cascade_percent, float),
    "GENESIS_FLEET_CASCADE_WINDOW_SECONDS": (lambda c: c.fleet_cascade_window, float),
    "GENESIS_FLEET_MONITOR_STALE_SECONDS": (lambda c: c.monitor_stale, float),
    "GENESIS_FLEET_MONITOR_STOP_SECONDS": (lambda c: c.monitor_stop, float),
    "GENESIS_FLEET_WORKTREE_DIR": (lambda c: str(c.fleet_worktree_dir or ""), str),
    "GENESIS_FLEET_MERGE": (lambda c: c.fleet_merge, str),
    "GENESIS_MERGE_TEST_CMD": (lambda c: c.merge_test_cmd, str),
    "GENESIS_MERGE_TEST_TIMEOUT": (lambda c: c.merge_test_timeout, lambda t: float(t.removesuffix("m")) * 60),
    "GENESIS_CHECK_CMD": (lambda c: c.check_cmd, str),
    "GENESIS_CHECK_TIMEOUT": (lambda c: c.check_timeout, lambda t: float(t.removesuffix("m")) * 60),
    "GENESIS_FLEET_CHILD_ITERATIONS": (lambda c: fleet_settings(c.settings).child_iterations, int),
    "GENESIS_FLEET_STAGGER_SECONDS": (lambda c: fleet_settings(c.settings).stagger, float),
    "GENESIS_FLEET_MEMORY_PER_AGENT_MB": (lambda c: fleet_settings(c.settings).memory_per_agent, lambda t: int(t) << 20),
    "GENESIS_FLEET_MEMORY_FLOOR_MB": (lambda c: fleet_settings(c.settings).memory_floor, lambda t: int(t) << 20),
    "GENESIS_FLEET_PORT_BASE": (lambda c: fleet_settings(c.settings).port_base, int),
    "GENESIS_FLEET_PORTS_PER_TASK": (lambda c: fleet_settings(c.settings).ports_per_task, int),
    "GENESIS_FLEET_CHECK_SECONDS": (lambda c: fleet_settings(c.settings).check, float),
    "GENESIS_NOTIFY_DESKTOP": (lambda c: c.alerts.desktop, str),
    "GENESIS_NOTIFY_TIMEOUT_SECONDS": (lambda c: c.alerts.timeout, float),
    "GENESIS_NOTIFY_RETRIES": (lambda c: c.alerts.retries, int),
    "GENESIS_TRIAGE_TIMEOUT_SECONDS": (lambda c: c.alerts.triage_timeout, float),
    **{f"GENESIS_NOTIFY_{key}_MIN_SEVERITY": ((lambda c, name=name: c.alerts.minimum(name)), str)
       for name, key in (("desktop", "DESKTOP"), ("webhook", "WEBHOOK"), ("ntfy", "NTFY"), ("command", "CMD"))},
    "GENESIS_LOG_DIR": (lambda c: c.log_dir.relative_to(c.project).as_posix(), str),
    "GENESIS_STOP_FLAG": (lambda c: c.stop_flag.relative_to(c.project).as_posix(), str),
    "GENESIS_FLEET_ENGINE": (lambda c: temporal_settings(c.settings).engine, str),
    "GENESIS_TEMPORAL_ADDRESS": (lambda c: temporal_settings(c.settings).address, str),
    "GENESIS_TEMPORAL_NAMESPACE": (lambda c: temporal_settings(c.settings).namespace, str),
    "GENESIS_TEMPORAL_TASK_QUEUE": (lambda c: temporal_settings(c.settings).queue_prefix, str),
    "GENESIS_TEMPORAL_HOST": (lambda c: temporal_settings(c.settings, "box.example").host,
                              lambda t: t or "box"),
    "GENESIS_TEMPORAL_HEARTBEAT_SECONDS": (lambda c: temporal_settings(c.settings).heartbeat, float),
    "GENESIS_TEMPORAL_HOST_WAIT_SECONDS": (lambda c: temporal_settings(c.settings).host_wait, float),
    "GENESIS_TEMPORAL_REMOTE": (lambda c: temporal_settings(c.settings).remote, str),
    "GENESIS_TEMPORAL_ACCOUNT": (lambda c: temporal_settings(c.settings).account, str),
    "GENESIS_TEMPORAL_TLS_CA": (lambda c: temporal_settings(c.settings).tls_ca, str),
    "GENESIS_TEMPORAL_TLS_CERT": (lambda c: temporal_settings(c.settings).tls_cert, str),
    "GENESIS_TEMPORAL_TLS_KEY": (lambda c: temporal_settings(c.settings).tls_key, str),
    "GENESIS_TEMPORAL_API_KEY_FILE": (lambda c: temporal_settings(c.settings).api_key_file, str),
    "GENESIS_TEMPORAL_AGENT_COMMANDS": (lambda c: "|".join(temporal_settings(c.settings).agent_commands), str),
    "GENESIS_TEMPORAL_METRICS": (lambda c: temporal_settings(c.settings).metrics, str),
}


def test_a_config_of_the_defaults_alone_holds_each_knobs_documented_default(project):
    """The knob table is the one source of the defaults: a Config built from nothing else holds
    each as `genesis config show` documents it (and a knob added with a default is read here)."""
    cfg = resolve(project, env={})
    assert set(READ) == {k.name for k in KNOBS if k.default is not None}
    for knob in KNOBS:
        if knob.default is not None:
            held, meant = READ[knob.name]
            assert held(cfg) == meant(knob.default), knob.name
    # Unset knobs mean nothing set: no fallback command, no cooldown, the CLI named by the command.
    assert (cfg.fallback_agent_cmd, cfg.cb_cooldown, cfg.agent_cli) == ((), None, "")
    assert (cfg.alerts.webhook, cfg.alerts.ntfy, cfg.alerts.command, cfg.alerts.triage_command) == (None,) * 4


def test_flags_beat_environment_beat_file_beat_defaults(project):
    conf(project, "CB_WARNING_THRESHOLD=2\nCB_STOP_THRESHOLD=4\nITERATION_PAUSE_SECONDS=7\n")
    cfg = resolve(project, env={"CB_STOP_THRESHOLD": "6", "ITERATION_PAUSE_SECONDS": "8"},
                  flags={"ITERATION_PAUSE_SECONDS": "9"})
    assert (cfg.cb_warning, cfg.cb_stop, cfg.pause) == (2, 6, 9)
    assert cfg.settings["CB_WARNING_THRESHOLD"].source == "file"
    assert cfg.settings["CB_STOP_THRESHOLD"].source == "env"
    assert cfg.settings["ITERATION_PAUSE_SECONDS"].source == "flag"


# --- durations: one grammar for every duration knob ------------------------------------

@pytest.mark.parametrize("key, value, held", [
    ("HEARTBEAT_STALE", "90s", lambda c: c.stale_after == 90),
    ("HEARTBEAT_STALE", "90", lambda c: c.stale_after == 90),            # a name without a unit: seconds
    ("AGENT_MAX_RUNTIME", "2h", lambda c: c.max_runtime == 7200),
    ("TOOL_SILENT", "0", lambda c: c.tool_silent == 0),                   # off
    ("ITERATION_PAUSE_SECONDS", "1.5m", lambda c: c.pause == 90),
    ("TOOL_BUSY_MAX_MINUTES", "2", lambda c: c.tool_busy_max == 120),    # a bare number: the name's unit
    ("TOOL_BUSY_MAX_MINUTES", "90s", lambda c: c.tool_busy_max == 90),
    ("GENESIS_MAX_RUNTIME_HOURS", "1.5", lambda c: c.max_run_seconds == 5400),
    ("GENESIS_MAX_RUNTIME_HOURS", "1d", lambda c: c.max_run_seconds == 86400),
    ("GENESIS_MAX_OUTAGE_MINUTES", "2h", lambda c: c.max_outage == 7200),
    ("CB_COOLDOWN_MINUTES", "30s", lambda c: c.cb_cooldown == 30),
    ("GENESIS_MAX_LIMIT_WAIT", "3600", lambda c: c.max_limit_wait == 3600),
    ("GENESIS_MERGE_TEST_TIMEOUT", "1h", lambda c: c.merge_test_timeout == 3600),
    ("GENESIS_FLEET_MONITOR_STOP_SECONDS", "10m", lambda c: c.monitor_stop == 600),
    ("GENESIS_NOTIFY_TIMEOUT_SECONDS", "1m", lambda c: c.alerts.timeout == 60),
    ("GENESIS_FLEET_CHECK_SECONDS", "500ms" if False else "0.5s", lambda c: fleet_settings(c.settings).check == 0.5),
    ("GENESIS_TEMPORAL_HOST_WAIT_SECONDS", "10m", lambda c: temporal_settings(c.settings).host_wait == 600),
])
def test_every_duration_knob_takes_a_unit_or_a_bare_number_in_its_names_unit(project, key, value, held):
    assert held(resolve(project, env={key: value}))


@pytest.mark.parametrize("key", [k.name for k in KNOBS if k.unit])
def test_a_duration_knob_that_is_no_duration_is_refused_with_what_to_write(project, key):
    cfg = resolve(project, env={})
    env = {key: "15x"}
    with pytest.raises(ConfigError, match=rf"^{key}='15x'( \(env\))? is not a duration: write 90s, 15m or 2h"):
        cfg = resolve(project, env=env)
        fleet_settings(cfg.settings)
        temporal_settings(cfg.settings)


def test_a_knobs_unit_is_the_one_its_name_says():
    suffixes = {"_SECONDS": "s", "_MINUTES": "m", "_HOURS": "h"}
    for knob in KNOBS:
        said = next((unit for suffix, unit in suffixes.items() if knob.name.endswith(suffix)), None)
        if said:
            assert knob.unit == said, knob.name
    assert {k.name for k in KNOBS if k.unit == "s" and not k.name.endswith("_SECONDS")} == {
        "HEARTBEAT_CHECK_INTERVAL", "HEARTBEAT_STALE", "AGENT_MAX_RUNTIME", "TOOL_SILENT", "GENESIS_MAX_LIMIT_WAIT",
        "GENESIS_MERGE_TEST_TIMEOUT", "GENESIS_CHECK_TIMEOUT", "AGENT_FIRST_EVENT_WINDOW", "AGENT_RESULT_EXIT_WINDOW",
        "AGENT_STREAM_IDLE_WINDOW"}


def test_a_bound_is_said_in_the_unit_the_value_was_written_in(project):
    with pytest.raises(ConfigError, match=r"TOOL_BUSY_MAX_MINUTES='0.5s' \(env\): must be at least 0.6s"):
        resolve(project, env={"TOOL_BUSY_MAX_MINUTES": "0.5s"})
    with pytest.raises(ConfigError, match=r"GENESIS_TEMPORAL_HEARTBEAT_SECONDS='2h' \(env\): expected 1s to 3600s"):
        temporal_settings(resolve(project, env={"GENESIS_TEMPORAL_HEARTBEAT_SECONDS": "2h"}).settings)


# --- the old names of the three windows -------------------------------------------------

@pytest.mark.parametrize("old, new, value, seconds", [
    ("HEARTBEAT_STALE_MINUTES", "HEARTBEAT_STALE", "2", 120),
    ("HEARTBEAT_STALE_SECONDS", "HEARTBEAT_STALE", "90", 90),
    ("AGENT_MAX_RUNTIME_MINUTES", "AGENT_MAX_RUNTIME", "1.5", 90),
    ("AGENT_MAX_RUNTIME_SECONDS", "AGENT_MAX_RUNTIME", "5", 5),
    ("TOOL_SILENT_MINUTES", "TOOL_SILENT", "0", 0),
    ("TOOL_SILENT_SECONDS", "TOOL_SILENT", "120", 120),
])
def test_an_old_name_still_sets_its_window_and_is_said_to_be_old(project, old, new, value, seconds):
    held = {"HEARTBEAT_STALE": "stale_after", "AGENT_MAX_RUNTIME": "max_runtime", "TOOL_SILENT": "tool_silent"}[new]
    unit = old.rsplit("_", 1)[1][0].lower()
    for cfg in (resolve(project, env={old: value}), resolve(project, env={}, flags={old: value})):
        assert getattr(cfg, held) == seconds
        assert cfg.settings[new].value == f"{value}{unit}" and old not in cfg.settings
        assert advice(cfg, {})[0] == f"{old} is an old name: write {new}={value}{unit}"
    conf(project, f"{old}={value}\n")
    assert getattr(resolve(project, env={}), held) == seconds


def test_the_old_names_keep_their_precedence_and_the_new_name_wins_at_equal_precedence(project):
    # The _SECONDS form wins over the _MINUTES one from the same source, as it always did...
    assert resolve(project, env={"HEARTBEAT_STALE_SECONDS": "90", "HEARTBEAT_STALE_MINUTES": "2"}).stale_after == 90
    conf(project, "HEARTBEAT_STALE_SECONDS=90\n")
    # ...and a higher source wins whatever the name.
    assert resolve(project, env={"HEARTBEAT_STALE_MINUTES": "2"}).stale_after == 120
    assert resolve(project, env={"HEARTBEAT_STALE": "3m"}).stale_after == 180
    conf(project, "HEARTBEAT_STALE=3m\nHEARTBEAT_STALE_SECONDS=90\n")
    cfg = resolve(project, env={})
    assert cfg.stale_after == 180 and cfg.settings["HEARTBEAT_STALE"].source == "file"
    assert not any("old name" in line for line in advice(cfg, {}))   # the old one is overruled, not read
    cfg = resolve(project, env={}, flags={"HEARTBEAT_STALE_SECONDS": "100"})
    assert cfg.stale_after == 100 and cfg.settings["HEARTBEAT_STALE"].source == "flag"


def test_a_bad_value_under_an_old_name_is_refused_under_that_name(project):
    with pytest.raises(ConfigError, match=r"^AGENT_MAX_RUNTIME_MINUTES='x' \(env\) is not a duration: .*minutes"):
        resolve(project, env={"AGENT_MAX_RUNTIME_MINUTES": "x"})


def test_config_show_names_the_new_knob_with_where_an_old_name_set_it(project, monkeypatch):
    monkeypatch.setenv("TOOL_SILENT_SECONDS", "75")
    result = CliRunner().invoke(cli, ["--project", str(project), "config", "show"], catch_exceptions=False)
    lines = result.output.splitlines()
    assert any(line.split()[:3] == ["TOOL_SILENT", "75s", "[env]"] for line in lines)
    assert not any(line.startswith("TOOL_SILENT_SECONDS") for line in lines)
    assert "genesis: warning: TOOL_SILENT_SECONDS is an old name: write TOOL_SILENT=75s" in result.stderr


def test_a_run_snapshot_written_under_the_old_names_is_read_under_the_new(project):
    from genesis.config import from_snapshot, snapshot
    data = snapshot(resolve(project, env={}))
    del data["HEARTBEAT_STALE"]
    cfg = from_snapshot(project, {**data, "HEARTBEAT_STALE_MINUTES": ["3", "env"]})
    assert cfg.stale_after == 180 and "HEARTBEAT_STALE_MINUTES" not in snapshot(cfg)


def test_the_agent_command_is_word_split_like_a_shell(project):
    cfg = resolve(project, env={"GENESIS_AGENT_CMD": "codex exec --model 'o4 mini'"})
    assert cfg.agent_cmd == ("codex", "exec", "--model", "o4 mini")


@pytest.mark.parametrize("env, message", [
    ({"HEARTBEAT_STALE": "30s", "HEARTBEAT_CHECK_INTERVAL": "1m"}, "shorter than HEARTBEAT_CHECK_INTERVAL"),
    ({"CB_WARNING_THRESHOLD": "5", "CB_STOP_THRESHOLD": "3"}, "must warn before it stops"),
    ({"CB_STOP_THRESHOLD": "five"}, "expected a whole number"),
    ({"HEARTBEAT_CHECK_INTERVAL": "nan"}, "is not a duration"),
    ({"HEARTBEAT_CHECK_INTERVAL": "0.01"}, r"HEARTBEAT_CHECK_INTERVAL='0.01' \(env\): must be at least 0.05s"),
    ({"GENESIS_AGENT_CMD": "  "}, "is empty"),
    ({"GENESIS_AGENT_CMD": "claude 'unclosed"}, "check its quotes"),
    ({"REAP_PORTS": "8080,99999"}, "not a port number"),
    ({"REAP_PATTERNS": "(unclosed"}, "not a valid regex"),
    ({"REAP_SCOPE": "everything"}, "expected all or matching"),
    ({"AUTO_COMMIT": "maybe"}, "expected true or false"),
    ({"GENESIS_PHASES": "Builder Builder"}, "listed twice"),
    ({"GENESIS_PHASES": "Reviewer", "PHASE_Reviewer_TRIGGER": "sometimes"}, "always, never, every:N"),
    ({"GENESIS_PHASES": "Reviewer"}, "no prompt file"),
])
def test_bad_values_get_a_clear_error(project, env, message):
    with pytest.raises(ConfigError, match=message):
        resolve(project, env=env)


def test_a_config_file_line_that_is_not_a_known_key_is_named(project):
    conf(project, "# ok\nHEARTBEAT_STALE_MINUTS=3\n")
    with pytest.raises(ConfigError, match=r"genesis.conf:2: .*known key.*\(docs/reference/settings\.md lists the keys\)"):
        resolve(project, env={})


def test_custom_phases_with_project_prompts_and_triggers(project):
    (project / "orchestrator" / "prompts").mkdir(parents=True)
    (project / "orchestrator" / "prompts" / "reviewer.md").write_text("review")
    cfg = resolve(project, env={"GENESIS_PHASES": "Builder,Reviewer", "PHASE_Reviewer_TRIGGER": "every:3"})
    reviewer = cfg.phases[1]
    assert reviewer.prompt_file == project / "orchestrator" / "prompts" / "reviewer.md"
    assert str(reviewer.trigger) == "every:3"


def test_config_show_prints_every_value_and_its_source(project, monkeypatch):
    monkeypatch.setenv("CB_STOP_THRESHOLD", "7")
    result = CliRunner().invoke(cli, ["--project", str(project), "--set", "ITERATION_PAUSE_SECONDS=1",
                                      "config", "show"], catch_exceptions=False)
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert any(line.split()[:3] == ["CB_STOP_THRESHOLD", "7", "[env]"] for line in lines)
    assert any(line.split()[:3] == ["ITERATION_PAUSE_SECONDS", "1", "[flag]"] for line in lines)
    assert any(line.split()[:3] == ["HEARTBEAT_STALE", "15m", "[default]"] for line in lines)
    assert any(line.startswith("PHASE_Builder_TRIGGER") and "always" in line for line in lines)
    explained = CliRunner().invoke(cli, ["--project", str(project), "config", "show", "--explain"],
                                   catch_exceptions=False)
    assert any(line.split(None, 3) == ["KILL_GRACE_SECONDS", "10", "[default]",
                                       "# SIGTERM, then SIGKILL after this many seconds"]
               for line in explained.output.splitlines())


def test_invalid_configuration_exits_2_with_the_reason(project):
    result = CliRunner().invoke(cli, ["--project", str(project), "--set", "CB_STOP_THRESHOLD=x",
                                      "config", "show"], catch_exceptions=False)
    assert result.exit_code == 2 and "CB_STOP_THRESHOLD" in result.output


# --- sizes: every input is bounded, and too much is refused with the reason ----------

def test_a_config_file_over_the_size_limit_is_refused_untouched(project):
    conf(project, "# a comment line, repeated\n" * 5000)  # about 130 KB: no real configuration is that long
    path = project / "orchestrator" / "genesis.conf"
    with pytest.raises(ConfigError, match=r"genesis\.conf is larger than 64 KiB"):
        resolve(project, env={})
    assert path.stat().st_size > MAX_CONFIG_BYTES  # nothing moved or lost


def test_a_huge_config_file_is_refused_without_reading_it_all(project):
    conf(project, "GENESIS_AGENT_CMD=" + "x" * (10 << 20) + "\n")  # 10 MB on one line
    with pytest.raises(ConfigError, match="larger than 64 KiB"):
        resolve(project, env={})


def test_an_overlong_line_is_named_with_its_line_number(project):
    conf(project, "# fine\nGENESIS_AGENT_CMD='claude -p " + "y" * MAX_VALUE_CHARS + "'\nAUTO_PUSH=false\n")
    with pytest.raises(ConfigError, match=r"genesis\.conf:2: the line is \d+ characters long, more than the 8192"):
        resolve(project, env={})


def test_a_line_at_the_limit_is_still_read(project):
    value = "z" * (MAX_VALUE_CHARS - len("GENESIS_AGENT_CMD=agent "))
    conf(project, f"GENESIS_AGENT_CMD=agent {value}\n")
    assert resolve(project, env={}).agent_cmd == ("agent", value)


@pytest.mark.parametrize("source", ["env", "flag"])
def test_a_huge_value_from_the_environment_or_a_flag_is_refused_at_once(project, source):
    huge = "claude -p " + "w" * (10 << 20)  # 10 MB: word-splitting it would take hours
    env, flags = ({"GENESIS_AGENT_CMD": huge}, {}) if source == "env" else ({}, {"GENESIS_AGENT_CMD": huge})
    where = "the environment" if source == "env" else "a --set flag"
    with pytest.raises(ConfigError, match=f"GENESIS_AGENT_CMD from {where} is {len(huge)} characters long"):
        resolve(project, env=env, flags=flags)


def test_a_config_file_that_is_a_fifo_is_refused_not_waited_on(project):
    (project / "orchestrator").mkdir()
    os.mkfifo(project / "orchestrator" / "genesis.conf")
    with pytest.raises(ConfigError, match="not a regular file"):
        resolve(project, env={})


def test_a_corrupt_config_file_is_still_moved_aside(project):
    (project / "orchestrator").mkdir()
    (project / "orchestrator" / "genesis.conf").write_bytes(b"AUTO_PUSH=\xff\xfe\n")
    with pytest.raises(ConfigError, match="corrupt .* moved aside"):
        resolve(project, env={})
    assert not (project / "orchestrator" / "genesis.conf").exists()
    assert len(list((project / "orchestrator").glob("genesis.conf.corrupt-*"))) == 1


def test_a_prompt_file_over_the_limit_is_refused_with_its_setting(project):
    prompts = project / "orchestrator" / "prompts"
    prompts.mkdir(parents=True)
    (prompts / "builder.md").write_bytes(b"p" * (MAX_PROMPT_BYTES + 1))
    with pytest.raises(ConfigError, match=r"PHASE_Builder_PROMPT: the prompt file .*builder\.md is 1048577 "
                                          r"bytes, over the 1 MiB limit"):
        resolve(project, env={"GENESIS_PHASES": "Builder"})


def test_read_prompt_reads_text_and_refuses_what_is_not(tmp_path):
    good = tmp_path / "good.md"
    good.write_text("Do the next task. \u2713\n", encoding="utf-8")
    assert read_prompt(good) == "Do the next task. \u2713\n"
    big = tmp_path / "big.md"
    big.write_bytes(b"p" * (MAX_PROMPT_BYTES + 1))
    with pytest.raises(ConfigError, match="over the 1 MiB limit"):
        read_prompt(big)
    latin = tmp_path / "latin.md"
    latin.write_bytes(b"caf\xe9\n")
    with pytest.raises(ConfigError, match=r"latin\.md is not UTF-8 text .*save it as UTF-8"):
        read_prompt(latin)
    nul = tmp_path / "nul.md"
    nul.write_bytes(b"text\0more")
    with pytest.raises(ConfigError, match=r"holds a NUL byte \(at byte 4\)"):
        read_prompt(nul)
    fifo = tmp_path / "fifo.md"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        read_prompt(fifo)
    with pytest.raises(ConfigError, match="cannot read the prompt file"):
        read_prompt(tmp_path / "missing.md")


def test_closest_names_the_knob_a_misspelt_key_meant_and_nothing_far():
    assert closest("GENESIS_MAX_ITERATONS") == "GENESIS_MAX_ITERATIONS"
    assert closest("GENESIS_NOTIFY_COMMAND") == "GENESIS_NOTIFY_CMD"
    assert closest("PHASE_Reviewer_PROMT", ("Builder", "Reviewer")) == "PHASE_Reviewer_PROMPT"
    assert closest("GENESIS_FAULT_TALLY") is None and closest("AUTO_RELOAD_PROXY") is None


def test_advice_on_the_environment_names_typos_and_spares_genesis_own_variables(project):
    env = {"GENESIS_MAX_ITERATONS": "3", "GENESIS_ITERATION": "2", "GENESIS_PHASE": "Builder",
           "GENESIS_AGENT": "Builder", "GENESIS_RUN_ID": "r", "CB_WARNING_TRESHOLD": "2", "TOOL_HOME": "/x",
           "PATH": "/bin"}
    said = advice(resolve(project, env=env), env)
    assert said == ["CB_WARNING_TRESHOLD is set in the environment but is not a setting, so it is ignored; did you "
                    "mean CB_WARNING_THRESHOLD?",
                    "GENESIS_MAX_ITERATONS is set in the environment but is not a setting, so it is ignored; did you "
                    "mean GENESIS_MAX_ITERATIONS?"]
    many = {f"GENESIS_MAX_ITERATION{c}": "1" for c in "ABCDEFGHIJKL"}
    assert len(advice(resolve(project, env={}), many)) == 10


def test_advice_on_genesis_conf_variables_and_phase_settings_for_no_phase(project):
    conf(project, "GENESIS_LOG_DIR=${HOME}/logs\nREAP_PATTERNS='x$'\nPHASE_Planner_TRIGGER='when:test -n \"$X\"'\n"
                  "PHASE_Reviewer_TRIGGER=never\nPHASE_Plannr_PROMPT=planner.md\n")
    env = {"HOME": "/home/me", "GENESIS_PHASES": "Builder Planner"}
    said = advice(resolve(project, env=env), env)
    assert said == [
        "GENESIS_LOG_DIR='${HOME}/logs' in orchestrator/genesis.conf is used as written, $HOME and all: genesis.conf "
        "is never run by a shell, so nothing in it is expanded. Write the value itself: GENESIS_LOG_DIR=/home/me/logs",
        "PHASE_Plannr_PROMPT (orchestrator/genesis.conf) is for a phase named Plannr, which is not in "
        "GENESIS_PHASES (Builder Planner), so it is ignored; did you mean PHASE_Planner_PROMPT?"]
    # Any other variable may hold a secret: it is named, never expanded into the console.
    conf(project, "GENESIS_NOTIFY_CMD='notify --token $TOKEN'\n")
    assert advice(resolve(project, env={}), {"TOKEN": "s3cret"}) == [
        "GENESIS_NOTIFY_CMD='notify --token $TOKEN' in orchestrator/genesis.conf is used as written, $TOKEN and all: "
        "genesis.conf is never run by a shell, so nothing in it is expanded. Write the value itself there, or set "
        "GENESIS_NOTIFY_CMD in the environment or with --set, where your shell expands it"]
    # A value from the environment went through the user's shell already: nothing to say.
    conf(project, "")
    assert advice(resolve(project, env={"GENESIS_LOG_DIR": "$weird", "GENESIS_PHASES": "Builder Reviewer",
                                        "PHASE_Reviewer_PROMPT": "criticizer.md"}), {}) == []


@pytest.mark.parametrize("env, held", [({"GENESIS_SANDBOX": "Off"}, ("off", auto_cap())),
                                       ({"GENESIS_SANDBOX": "bwrap", "GENESIS_AGENT_MEMORY_MAX": "8G"},
                                        ("bwrap", 8 << 30)),
                                       ({"GENESIS_AGENT_MEMORY_MAX": "none"}, ("auto", None))])
def test_the_box_and_the_memory_cap(project, env, held):
    cfg = resolve(project, env=env)
    assert (cfg.sandbox, cfg.agent_memory_max) == held


def test_the_network_allow_list_reads_hosts_ports_and_domains(project):
    cfg = resolve(project, env={"GENESIS_NETWORK_ALLOW": "API.example.com, *.corp.example 127.0.0.1:5432,[::1]:8080"})
    assert [(e.host, e.ports) for e in cfg.network_allow] == [
        ("api.example.com", (80, 443)), ("*.corp.example", (80, 443)), ("127.0.0.1", (5432,)), ("::1", (8080,))]
    assert resolve(project, env={}).network == "allowlist"


def test_the_box_allow_list_reads_modes_and_home(project, monkeypatch):
    monkeypatch.setenv("HOME", "/home/u")
    cfg = resolve(project, env={"GENESIS_BOX_ALLOW": "~/.kube:ro, /var/run/docker.sock:rw,/opt/x:y:rw, ~/.m"})
    assert cfg.box_allow == (Allowed("/home/u/.kube", False), Allowed("/var/run/docker.sock", True),
                             Allowed("/opt/x:y", True), Allowed("/home/u/.m", False))


@pytest.mark.parametrize("env, message", [
    ({"GENESIS_SANDBOX": "docker"}, "expected auto, bwrap, landlock, seatbelt or off"),
    ({"GENESIS_AGENT_MEMORY_MAX": "lots"}, "is not a size"),
    ({"GENESIS_BOX_ALLOW": "~/.kube:rx"}, "unknown mode 'rx'; write PATH:ro .read-only. or PATH:rw"),
    ({"GENESIS_BOX_ALLOW": "/opt/a:rw,relative/b"}, "'relative/b': not an absolute path"),
    ({"GENESIS_AGENT_PIDS_MAX": "-1"}, "GENESIS_AGENT_PIDS_MAX"),
    ({"GENESIS_NETWORK": "wifi"}, "expected allowlist, open or none"),
    ({"GENESIS_NETWORK_ALLOW": "api.example.com,127.0.0.1"}, "'127.0.0.1': a loopback address .* name the one port"),
    ({"GENESIS_NETWORK_ALLOW": "api.example.com:https"}, "the port after ':' must be a number"),
    ({"GENESIS_NETWORK_ALLOW": "example.com/api"}, "expected a host name, an address, or ..domain"),
])
def test_a_bad_box_or_memory_cap_is_refused(project, env, message):
    with pytest.raises(ConfigError, match=message):
        resolve(project, env=env)


@pytest.mark.fault(89)
@pytest.mark.parametrize("typo, meant", [("GENESIS_NOTIFY_WEBHOK", "GENESIS_NOTIFY_WEBHOOK"),
                                         ("GENESIS_NOTIFY_COMMAND", "GENESIS_NOTIFY_CMD"),
                                         ("GENESIS_NTFY", "GENESIS_NOTIFY_NTFY"),
                                         ("GENESIS_NOTIFI_WEBHOOK", "GENESIS_NOTIFY_WEBHOOK"),
                                         ("GENESIS_NTIFY_CMD_MIN_SEVERITY", "GENESIS_NOTIFY_CMD_MIN_SEVERITY")])
def test_a_misspelt_alert_channel_in_the_environment_is_refused_not_only_warned_about(project, typo, meant):
    with pytest.raises(ConfigError) as caught:
        resolve(project, env={typo: "https://ntfy.sh/night"})
    assert str(caught.value).startswith(f"{typo} is set in the environment but is not an alert setting; did you "
                                        f"mean {meant}?")
    # Any other misspelt knob is still warned about only, and Genesis's own variables are no typo.
    env = {"GENESIS_MAX_ITERATONS": "3", "GENESIS_ALERT_TEXT": "x", "GENESIS_ALERT_SEVERITY": "high"}
    assert advice(resolve(project, env=env), env) == [
        "GENESIS_MAX_ITERATONS is set in the environment but is not a setting, so it is ignored; did you mean "
        "GENESIS_MAX_ITERATIONS?"]


def test_the_stream_idle_window_is_refused_outside_what_claude_code_takes(project):
    assert resolve(project, env={"AGENT_STREAM_IDLE_WINDOW": "0"}).stream_idle_window == 0
    assert resolve(project, env={"AGENT_STREAM_IDLE_WINDOW": "2m"}).stream_idle_window == 120
    with pytest.raises(ConfigError, match=r"^AGENT_STREAM_IDLE_WINDOW=5s: Claude Code's stream watchdog takes 10s "
                                          r"to 30m"):
        resolve(project, env={"AGENT_STREAM_IDLE_WINDOW": "5s"})
