-- Natural keys for the sandbox writes, so that each rides out a database outage like every other
-- write (rollout.ledger.retry): rerun after a COMMIT whose answer was lost, it stores nothing
-- twice.
--
-- A sandbox event happens at most once per instance, claim epoch and kind: an instance starts
-- once (epoch 0), each claim takes a new epoch (claimed, then at most one reset, one release,
-- and one expiry when the next claim takes it over), and retiring happens once. Rows written
-- twice before this key existed (a retried write) are facts recorded twice: the first is kept.
DELETE FROM sandbox_events AS later
 USING sandbox_events AS earlier
 WHERE later.instance_id = earlier.instance_id AND later.epoch = earlier.epoch
   AND later.event = earlier.event AND later.id > earlier.id;
CREATE UNIQUE INDEX sandbox_events_once ON sandbox_events (instance_id, epoch, event);

-- The agent whose seat made the current claim: a claim rerun by that same seat attempt finds
-- its own claim and prepares the instance, rather than joining it as another agent would.
ALTER TABLE sandboxes ADD COLUMN claimer integer;
