-- Presets stored in the ledger (`rollout preset load`), so every machine of a deployment
-- trains with the same ones. A fact per new content of a name: loading the same body again
-- adds nothing, and the latest body of a name is its current preset.
CREATE TABLE presets (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text NOT NULL CHECK (name <> ''),
    content_hash text NOT NULL,
    body         text NOT NULL,
    source       text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX presets_by_name ON presets (name, id DESC);

CREATE VIEW current_presets AS
SELECT DISTINCT ON (name) name, content_hash, body, source, created_at
FROM presets
ORDER BY name, id DESC;
