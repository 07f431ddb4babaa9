"""When the critic runs whatever the verdict and the judge has criteria to check, the two ask at once,
in one step, and weigh settles the critic's scores against the verdict. Each test tries to make the
step do harm: two model calls that together pass a cap, a critic or a judge that never answers (or
both), a critic that disagrees, a kill between the two, a trace the graph would not replay."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from boundloop.graph.core.status import Terminal
from boundloop.graph.run.runner import Runner, RunReport
from boundloop.graph.task import RunSettings, Task
from boundloop.graph.trace.fields import missing_trace_fields
from boundloop.graph.trace.replay import replay_run
from tests.graph.conftest import CRITIC_FAIL, CRITIC_PASS, JUDGE_PASS, READ_NOTES, step
from tests.graph.fake_openai import FakeOpenAI
from tests.graph.test_cli import BOUNDLOOP, _env, boundloop

CRITERION = "names Ana's action item"
TASK = {"goal": "Summarize notes.md", "acceptance_criteria": [CRITERION]}
"""One criterion no check covers: the judge has it to check."""
ACTOR = [step(calls=[READ_NOTES]), step("Ana publishes the notes.")]


async def nodes_by_step(runner: Runner, report: RunReport) -> list[tuple[int, list[str]]]:
    steps: dict[int, list[str]] = {}
    for event in await runner.trace(report.thread_id):
        if event["kind"] == "node":
            steps.setdefault(event["data"]["step"], []).append(event["node"])
    return [(number, sorted(names)) for number, names in sorted(steps.items())]


def calls(report: RunReport) -> dict[str, int]:
    return dict(report.values["usage"]["calls_by_role"])


async def test_the_critic_asks_while_the_judge_is_still_answering(db_url, workspace, monkeypatch):
    """Against a provider whose judge takes 2 s: the critic's request arrives before the judge's answer."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    with FakeOpenAI(faults={"judge": [{"hang_s": 2}]}) as fake:
        settings = RunSettings(model="fake-model", base_url=fake.base_url, workspace_root=str(workspace), unattended=True, critique="always",
                               prices={"fake-model": (2.0, 8.0)})
        async with Runner(db_url) as runner:
            report = await runner.start(Task.model_validate(TASK), settings)
            steps = await nodes_by_step(runner, report)
            replayed = await replay_run(runner.pool, report.thread_id, runner.graph)
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    judge_at, critic_at = fake.arrived[fake.roles.index("judge")], fake.arrived[fake.roles.index("critic")]
    assert critic_at < judge_at + 2, "the critic waited for the judge's verdict"
    assert (fake.count("judge"), fake.count("critic")) == (1, 1)
    together = next(number for number, names in steps if names == ["critique", "verify"])
    assert dict(steps)[together + 1] == ["weigh"]
    assert "critique" not in [name for number, names in steps if number > together for name in names]
    decision = report.values["control"]["critique"]
    assert decision["beside_judge"] is True and decision["run"] is True
    assert report.values["quality"]["critique"]["passed"] is True and "pending" not in report.values["quality"]["critique"]
    assert replayed.valid, replayed.problems  # every guard, run again on its step's checkpoint, picks what the trace records


async def test_without_a_trigger_the_critic_is_decided_after_the_verdict_and_not_asked(run_script):
    report = await run_script({"actor": ACTOR, "judge": [JUDGE_PASS]}, task=TASK, critique=None)
    assert report.status == Terminal.SUCCESS
    assert calls(report) == {"actor": 2, "judge": 1}
    assert "beside_judge" not in report.values["control"]["critique"]


async def test_a_critic_that_fails_what_the_judge_passed_is_settled_at_weigh_and_repaired(run_script, runner):
    """Unattended: the disagreement goes to repair; the repaired output is judged and critiqued again, at once again."""
    report = await run_script({"actor": [*ACTOR, step("Ana publishes the notes by Friday.")], "judge": [JUDGE_PASS, JUDGE_PASS],
                               "critic": [CRITIC_FAIL, CRITIC_PASS]}, task=TASK, unattended=True)
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    assert calls(report) == {"actor": 3, "judge": 2, "critic": 2}
    names = [names for _, names in await nodes_by_step(runner, report)]
    assert names.count(["critique", "verify"]) == 2 and names.count(["weigh"]) == 2 and ["repair"] in names
    assert report.values["quality"]["repairs"][0]["diagnosis"], "the critic's defect drove the repair"


async def test_two_calls_at_once_never_pass_the_model_call_cap(run_script):
    """Two model calls left: one each, at once. One left: only the judge may ask, so the critic waits
    for the verdict and the cap, not a second call, ends the run."""
    two_left = await run_script({"actor": ACTOR, "judge": [JUDGE_PASS], "critic": [CRITIC_PASS]}, task={**TASK, "budget": {"model_turns": 4}},
                                unattended=True)
    assert two_left.status == Terminal.SUCCESS
    assert two_left.values["control"]["critique"]["beside_judge"] is True
    assert two_left.values["usage"]["model_turns"] == 4

    one_left = await run_script({"actor": ACTOR, "judge": [JUDGE_PASS], "critic": [CRITIC_PASS]}, task={**TASK, "budget": {"model_turns": 3}},
                                unattended=True)
    assert one_left.status == Terminal.BUDGET_EXHAUSTED, one_left.values.get("ending")
    assert one_left.values["usage"]["model_turns"] == 3
    assert calls(one_left) == {"actor": 2, "judge": 1}
    assert "beside_judge" not in one_left.values["control"]["critique"]


async def test_the_output_token_cap_holds_for_two_calls_made_at_once(run_script):
    """8 output tokens left, and the judge and the critic would each spend 5: asked with the whole 8 each,
    they would pass the cap together. Each is held to its 4, so the cap holds."""
    report = await run_script({"actor": ACTOR, "judge": [JUDGE_PASS] * 3, "critic": [CRITIC_PASS] * 3},
                              task={**TASK, "budget": {"output_tokens": 28}}, unattended=True)
    assert report.values["control"]["critique"]["beside_judge"] is True
    assert report.values["usage"]["output_tokens"] <= 28, report.values["usage"]
    assert report.status == Terminal.BUDGET_EXHAUSTED, report.values.get("ending")
    assert report.values["ending"]["dimension"] == "output_tokens"


async def test_a_critic_nobody_hears_ends_the_run_at_weigh_and_a_judge_nobody_hears_ends_it_first(db_url, workspace, monkeypatch):
    """Unattended. The critic's provider errs: UNAVAILABLE_DEP naming the critic, decided at weigh, nothing
    committed. Both err in the same step: one ending, the judge's (verify's step wrote it), no conflict."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    down = [{"status": 503}] * 8
    endings = {}
    for name, faults in {"critic": {"critic": down}, "both": {"critic": down, "judge": down}}.items():
        with FakeOpenAI(faults=faults) as fake:
            settings = RunSettings(model="fake-model", base_url=fake.base_url, workspace_root=str(workspace), unattended=True,
                                   critique="always", prices={"fake-model": (2.0, 8.0)})
            async with Runner(db_url) as runner:
                report = await runner.start(Task.model_validate(TASK), settings)
                steps = await nodes_by_step(runner, report)
        assert report.status == Terminal.UNAVAILABLE_DEP, report.values.get("ending")
        assert "commit" not in [node for _, names in steps for node in names]
        assert ["weigh"] in [names for _, names in steps]
        endings[name] = report.values["ending"]
    assert "unavailable to the critic" in endings["critic"]["reason"], endings["critic"]
    assert "unavailable to the judge" in endings["both"]["reason"], endings["both"]


async def test_a_kill_after_the_critic_answered_resumes_without_asking_the_judge_again(db_url, workspace):
    """SIGKILL as critique leaves, beside the judge: verify's writes (and its trace events) were saved as
    it finished, the critic's were not. The resumed run asks the provider's critic again, never its
    judge, ends SUCCESS, and its trace is whole and replays on the graph."""
    args = ["run", TASK["goal"], "-c", CRITERION, "--critique", "always", "--workspace", str(workspace), "--budget", "cost_usd=none",
            "--thread", "beside", "--json", "--database-url", db_url]
    with FakeOpenAI(faults={"critic": [{"hang_s": 1}]}) as fake:  # the judge answers first: verify's writes are saved
        provider = ["--model", "fake-model", "--base-url", fake.base_url]
        env = _env(OPENAI_API_KEY="sk-test-key", BOUNDLOOP_CRASH_AT="leave:critique#1")
        killed = subprocess.run([BOUNDLOOP, *args, *provider], env=env, capture_output=True, text=True, timeout=120)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert (fake.count("judge"), fake.count("critic")) == (1, 1)
        resumed = boundloop("resume", "beside", "--json", "--database-url", db_url, env=_env(OPENAI_API_KEY="sk-test-key"))
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "SUCCESS"
    assert fake.count("judge") == 1  # verify's step was not run again
    assert fake.count("critic") == 2  # the critic's lost answer was asked again
    async with Runner(db_url) as runner:
        replayed = await replay_run(runner.pool, "beside", runner.graph)
        assert await missing_trace_fields(runner.pool, "beside") == []
    assert replayed.valid, replayed.problems
    assert {("act", "verify"), ("act", "critique")} <= set(replayed.transitions)
    assert [target for _, target in replayed.transitions].count("weigh") == 1


def test_show_says_the_critic_ran_beside_the_judge(db_url, tmp_path, workspace):
    script = Path(tmp_path / "script.json")
    script.write_text(json.dumps({"model_id": "scripted-show", "roles": {"actor": ACTOR, "judge": [JUDGE_PASS], "critic": [CRITIC_PASS]}}))
    ran = boundloop("run", TASK["goal"], "-c", CRITERION, "--critique", "always", "--model", "scripted", "--script", str(script),
                    "--workspace", str(workspace), "--thread", "shown", "--database-url", db_url)
    assert ran.returncode == 0, ran.stderr
    shown = boundloop("show", "shown", "--database-url", db_url)
    assert "ran beside the judge, in one step" in " ".join(shown.stdout.split()), shown.stdout
