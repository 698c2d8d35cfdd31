-- Turns stored as what they add to the previous turn of the same seat attempt, so a long
-- episode stores O(n) tokens and messages instead of O(n^2); and the indexes the monitor's and
-- trainer's reads need to stay flat as a run grows.
--
-- A turn's prompt is (prompt + completion of turn_index - 1)[1:prompt_prefix] || prompt_added,
-- and its request is request_added, plus the keys named in request_inherits taken from the
-- previous turn's request, with `messages` = (previous messages + [previous reply])
-- [1:messages_prefix] || request_added.messages when messages_prefix is not null. A row with
-- prompt_prefix = 0, messages_prefix null and no inherited keys stands alone: every row written
-- before this migration does (it keeps its full prompt and request).
--
-- The functions prompt_tokens(turns), prompt_length(turns) and request(turns) rebuild the full
-- values, so SQL that reads `t.prompt_tokens` or `t.request` (the monitor) reads what it read
-- before (Postgres resolves `t.f` to `f(t)` when the table has no column `f`). The ledger's own
-- reads rebuild in Python from a seat's rows (rollout.ledger.turn_storage).

ALTER TABLE turns RENAME COLUMN prompt_tokens TO prompt_added;
ALTER TABLE turns RENAME COLUMN request TO request_added;
ALTER TABLE turns
    ADD COLUMN prompt_prefix integer NOT NULL DEFAULT 0 CHECK (prompt_prefix >= 0),
    ADD COLUMN messages_prefix integer CHECK (messages_prefix >= 0),
    ADD COLUMN request_inherits text[] NOT NULL DEFAULT '{}';

CREATE FUNCTION prompt_length(t turns) RETURNS integer LANGUAGE sql IMMUTABLE AS $$
    SELECT t.prompt_prefix + cardinality(t.prompt_added)
$$;

CREATE FUNCTION prompt_tokens(t turns) RETURNS integer[] LANGUAGE plpgsql STABLE AS $$
DECLARE
    chain turns[] := ARRAY[t];
    cur turns := t;
    full_prompt integer[];
BEGIN
    WHILE cur.prompt_prefix > 0 LOOP
        SELECT * INTO STRICT cur FROM turns p
        WHERE p.episode_id = cur.episode_id AND p.agent = cur.agent
          AND p.attempt = cur.attempt AND p.turn_index = cur.turn_index - 1;
        chain := array_prepend(cur, chain);
    END LOOP;
    full_prompt := chain[1].prompt_added;
    FOR i IN 2 .. cardinality(chain) LOOP
        full_prompt := (full_prompt || chain[i - 1].completion_tokens)[1:chain[i].prompt_prefix]
                       || chain[i].prompt_added;
    END LOOP;
    RETURN full_prompt;
END
$$;

CREATE FUNCTION request(t turns) RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
    chain turns[] := ARRAY[t];
    cur turns := t;
    full_request jsonb;
    base jsonb;
    messages jsonb;
    r turns;
BEGIN
    WHILE cur.messages_prefix IS NOT NULL OR cardinality(cur.request_inherits) > 0 LOOP
        SELECT * INTO STRICT cur FROM turns p
        WHERE p.episode_id = cur.episode_id AND p.agent = cur.agent
          AND p.attempt = cur.attempt AND p.turn_index = cur.turn_index - 1;
        chain := array_prepend(cur, chain);
    END LOOP;
    full_request := chain[1].request_added;
    FOR i IN 2 .. cardinality(chain) LOOP
        r := chain[i];
        base := full_request;
        full_request := coalesce((SELECT jsonb_object_agg(e.key, e.value) FROM jsonb_each(base) e
                                  WHERE e.key = ANY (r.request_inherits)), '{}'::jsonb)
                        || r.request_added;
        IF r.messages_prefix IS NOT NULL THEN
            messages := coalesce(base -> 'messages', '[]'::jsonb);
            IF base ? 'reply' THEN
                messages := messages || jsonb_build_array(base -> 'reply');
            END IF;
            messages := coalesce((SELECT jsonb_agg(m.value ORDER BY m.n)
                                  FROM jsonb_array_elements(messages) WITH ORDINALITY m(value, n)
                                  WHERE m.n <= r.messages_prefix), '[]'::jsonb)
                        || coalesce(r.request_added -> 'messages', '[]'::jsonb);
            full_request := full_request || jsonb_build_object('messages', messages);
        END IF;
    END LOOP;
    RETURN full_request;
END
$$;

-- The monitor's per-run reads (run page counts, seat lists, runner views).
CREATE INDEX seats_run ON seats (run_id);
CREATE INDEX seat_ends_run ON seat_ends (run_id);
CREATE INDEX seat_claims_runner ON seat_claims (runner);
