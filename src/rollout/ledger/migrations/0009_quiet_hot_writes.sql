-- No wake-ups from the two writes made for every turn and every claim. A NOTIFY makes its
-- transaction take Postgres's one database-wide notification lock at commit and hold it through
-- the commit's WAL flush, so every notifying commit waits for the one before it: with 64
-- episodes in flight the turn records, claims and seat ends queued behind each other on that
-- lock (sampled from pg_stat_activity: about one backend always waiting on `Lock:object`).
-- Nothing waits on the `turns` or `claims` channels; seat ends (`ends`, `groups`), checkpoints
-- and settings still notify.
DROP TRIGGER turns_notify ON turns;
DROP TRIGGER seat_claims_notify ON seat_claims;
