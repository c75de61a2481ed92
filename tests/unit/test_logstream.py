"""The operator's log streams of container trials (``kubetune_operator.logstream``) against an HTTP server answering
the API server's ``pods/<pod>/log?follow=true`` as the API server does: 400 while the container is created, then
the lines as they are printed; a 403 when the operator may not read logs."""

from __future__ import annotations

import asyncio

from aiohttp import web
from kubernetes import client

from devcluster.testkit import ConfigMaps, experiment_object
from kubetune_operator.logstream import LogStreams
from kubetune_operator.podview import PodView
from kubetune_operator.registry import Registry
from kubetune_operator.settings import Settings

POD = "exp-00000-0"


def registry_with_a_running_trial() -> tuple[Registry, dict[str, PodView]]:
    registry = Registry(Settings(), b"k" * 32, ConfigMaps().write)
    ctl = registry.load(
        experiment_object(
            trainable={"command": ["train"]},
            image="user/train:1",
            config={"lr": 0.1},
            metric="loss",
            mode="min",
            stop={"training_iteration": 3},
        )
    )
    ctl.restore([])
    ctl.plan({}, 1e9)
    ctl.trial_created("exp-00000", "uid-1")
    ctl.plan({}, 1e9 + 1)
    pods = {POD: PodView(POD, "exp-00000", 0, "Running")}
    ctl.plan(pods, 1e9 + 2)
    return registry, pods


async def serve(handler) -> web.AppRunner:
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/pods/{pod}/log", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


def streams(registry, pods, port) -> LogStreams:
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    return LogStreams(cfg, registry, lambda ns, exp, pod: pods.get(pod))


async def wait_until(check, timeout=10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


def test_a_log_is_followed_from_creation_to_its_end_and_its_results_decided_on_as_they_are_printed():
    registry, pods = registry_with_a_running_trial()
    ctl = registry.get("ns", "exp")
    requests, printed = [], asyncio.Event()

    async def log(request: web.Request) -> web.StreamResponse:
        requests.append(dict(request.query))
        if len(requests) == 1:  # as the API server while the container is created
            return web.json_response({"message": "container is waiting to start"}, status=400)
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"starting\nepoch 1: loss=0.5\nepoch 2: lo")
        await printed.wait()
        await response.write(b"ss=0.4\nepoch 3: loss=0.3\n")
        pods[POD] = PodView(POD, "exp-00000", 0, "Succeeded", exit_code=0)  # the container ended: so does the log
        return response

    async def scenario():
        runner = await serve(log)
        logs = streams(registry, pods, runner.addresses[0][1])
        try:
            logs.follow(ctl, pods)
            logs.follow(ctl, pods)  # one stream per pod, however many passes ask
            assert len(logs.tasks) == 1
            await wait_until(lambda: ctl.trials["exp-00000"].status.get("iteration") == 1)
            assert not ctl.output_read(POD)  # the container still runs
            printed.set()
            await wait_until(lambda: ctl.output_read(POD))
            status = ctl.trials["exp-00000"].status
            assert (status["iteration"], status["lastResult"]["loss"]) == (3, 0.3)
            assert ctl.decisions.applied["exp-00000"].decision == "stop"  # spec.stop at iteration 3
            assert requests[-1] == {"container": "trial", "follow": "true"}
        finally:
            await logs.close()
            await runner.cleanup()

    asyncio.run(scenario())


def test_a_log_read_again_after_a_break_takes_no_result_twice_and_a_forbidden_read_is_said():
    registry, pods = registry_with_a_running_trial()
    ctl = registry.get("ns", "exp")
    calls, fed = [], []
    scheduler = ctl.decisions.scheduler
    decide = scheduler.on_trial_result
    scheduler.on_trial_result = lambda trial, result: fed.append(result["training_iteration"]) or decide(trial, result)

    async def log(request: web.Request) -> web.StreamResponse:
        calls.append(1)
        if len(calls) == 3:
            return web.json_response({"message": 'pods "exp-00000-0" is forbidden'}, status=403)
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"loss=0.5\nloss=0.4\n")  # the connection then breaks while the pod runs
        return response

    async def scenario():
        runner = await serve(log)
        logs = streams(registry, pods, runner.addresses[0][1])
        try:
            logs.follow(ctl, pods)
            await wait_until(lambda: len(calls) >= 3)
            await wait_until(lambda: ctl.lifecycle.output_errors.get(POD) is not None)
            assert ctl.lifecycle.output_errors[POD].startswith("HTTP 403: ")
            assert fed == [1, 2]  # each iteration reached the scheduler once, though the log was read twice
            assert ctl.trials["exp-00000"].status["lastResult"]["loss"] == 0.4
        finally:
            await logs.close()
            await runner.cleanup()

    asyncio.run(scenario())
