-- Rewards per turn: an observation may carry the reward of the reply it answers. A seat's turn
-- rewards are recorded with its end, in the same fenced statement (one commit, no extra round
-- trip; only a seat that ends has rewards worth training on): element k of `turn_rewards` is
-- the reward of turn k of the seat's winning attempt (NULL where its observation carried none),
-- the End's reward added to the last turn's. A NULL array (every seat written before, and every
-- seat whose observations carried no reward): the End's reward, `reward`, is the last turn's
-- and the seat's only one. `reward` stays the seat's whole reward (the sum of `turn_rewards`
-- when they are given).
--
-- The view `turn_rewards` shows each recorded turn reward next to its turn's key.
ALTER TABLE seat_ends ADD COLUMN turn_rewards float8[];

CREATE VIEW turn_rewards AS
SELECT e.run_id, e.episode_id, e.agent, e.attempt, (r.ord - 1)::integer AS turn_index,
       r.reward
FROM seat_ends e
CROSS JOIN LATERAL unnest(e.turn_rewards) WITH ORDINALITY AS r(reward, ord)
WHERE r.reward IS NOT NULL;
