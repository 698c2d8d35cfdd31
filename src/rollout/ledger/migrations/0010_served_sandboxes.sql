-- Sandbox instances that a sandbox host serves (`rollout sandboxes serve`): a clean one may be
-- claimed by a runner on any host (it needs no reset, which only its own host can do); once
-- used, its host retires it and starts a fresh one.
ALTER TABLE sandboxes ADD COLUMN served boolean NOT NULL DEFAULT false;
