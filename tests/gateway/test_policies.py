"""Several policies in one run: the gateway samples each seat from its agent's policy, through
one inference server that serves every policy's version (`rollout.inference.server` with
`policies`), and records the policy and version that sampled each turn."""

from __future__ import annotations

import openai

from rollout.gateway import GatewayServer, create_app
from rollout.inference.remote import RemoteBackend
from rollout.inference.scripted import ScriptedBackend
from rollout.inference.server import create_inference_app
from rollout.ledger import EpisodeSpec, Ledger
from rollout.net.server import AppServer
from rollout.rendering import HFRenderer
from rollout.runs.policies import PolicyConfig, PolicyMap

VERSIONS = {"walker": 3, "avoider": 11}


async def test_each_seat_samples_from_its_policys_version(
    ledger: Ledger, renderer: HFRenderer
) -> None:
    backends = {
        name: ScriptedBackend(renderer, lambda _prompt, name=name: f"I am {name}", version=v)
        for name, v in VERSIONS.items()
    }
    inference = create_inference_app(backends["walker"], model="tiny", policies=backends)
    mapping = PolicyMap.recorded(
        {
            "walker": PolicyConfig.model_validate({"agents": [0, 2]}),
            "avoider": PolicyConfig.model_validate({"agents": [1]}),
        }
    )
    run = await ledger.create_run("policies", "tests.gateway", {})
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, 0, agents=3)])
    claims = []
    while (claim := await ledger.claim_seat("tests", run_id=run.run_id)) is not None:
        claims.append(claim)
    assert sorted(c.agent for c in claims) == [0, 1, 2]
    async with AppServer(inference) as server:
        remotes = {name: RemoteBackend(server.url, policy=name) for name in mapping.names}
        app = create_app(
            ledger,
            renderer,
            RemoteBackend(server.url),
            model_name="tiny",
            policies=remotes,
            policy_of=mapping.policy_of,
        )
        gateway = GatewayServer(app)
        await gateway.start()
        try:
            for claim in claims:
                client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=claim.api_key)
                reply = await client.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": "who are you?"}]
                )
                assert reply.choices[0].message.content == f"I am {mapping.policy_of(claim.agent)}"
                # The streamed path routes the same way.
                stream = await client.chat.completions.create(
                    model="tiny",
                    messages=[{"role": "user", "content": "again?"}],
                    stream=True,
                )
                text = "".join(
                    [c.choices[0].delta.content or "" async for c in stream if c.choices]
                )
                assert text == f"I am {mapping.policy_of(claim.agent)}"
                await client.close()
        finally:
            await gateway.stop()
            for remote in remotes.values():
                await remote.close()
    for claim in claims:
        policy = mapping.policy_of(claim.agent)
        turns = await ledger.seat_turns(claim.episode_id, claim.agent, claim.attempt)
        assert [(t.policy, t.version) for t in turns] == [(policy, VERSIONS[policy])] * 2


async def test_a_policy_the_server_does_not_serve_is_refused(renderer: HFRenderer) -> None:
    backend = ScriptedBackend(renderer, lambda _prompt: "hi", version=1)
    app = create_inference_app(backend, model="tiny", policies={"walker": backend})
    async with AppServer(app) as server:
        remote = RemoteBackend(server.url, policy="scout", retries=1)
        try:
            from rollout.contracts import SamplingParams
            from rollout.inference.remote import InferenceUnavailable

            try:
                await remote.sample([1, 2, 3], SamplingParams())
            except InferenceUnavailable as error:
                assert "policy: 'scout' is not served here (serving: ['walker'])" in str(error)
            else:
                raise AssertionError("an unknown policy was served")
        finally:
            await remote.close()
