-- The tables mideng 0.1.0 created (record table mideng_records, its steps table and the
-- outbox mideng_outbox) on postgresql, before schema versions: one statement per ';' at a line's end.
CREATE TABLE IF NOT EXISTS mideng_records (
    scope text NOT NULL,
    key text NOT NULL,
    status text NOT NULL,
    fence bigint NOT NULL,
    owner text NOT NULL,
    fingerprint text,
    lease_until double precision,
    result bytea,
    codec text,
    error bytea,
    attempts integer NOT NULL DEFAULT 1,
    request_id text,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    expires_at double precision,
    PRIMARY KEY (scope, key)
);
CREATE INDEX IF NOT EXISTS mideng_records_expires ON mideng_records (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS mideng_records_open ON mideng_records (status, lease_until) WHERE status IN ('processing', 'unknown');
CREATE TABLE IF NOT EXISTS mideng_records_steps (scope text NOT NULL, key text NOT NULL, step text NOT NULL, result bytea, codec text, at double precision NOT NULL, PRIMARY KEY (scope, key, step));
CREATE TABLE IF NOT EXISTS mideng_outbox (id VARCHAR(36) NOT NULL PRIMARY KEY, aggregatetype VARCHAR(255) NOT NULL, aggregateid VARCHAR(255) NULL, type VARCHAR(255) NOT NULL, payload BYTEA NOT NULL, destination VARCHAR(255) NOT NULL, headers TEXT NOT NULL, request_id VARCHAR(255) NULL, seq BIGINT NULL, created_at DOUBLE PRECISION NOT NULL, state SMALLINT NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT NULL, sent_at DOUBLE PRECISION NULL, claimed_by VARCHAR(36) NULL, claimed_until DOUBLE PRECISION NULL);
CREATE UNIQUE INDEX IF NOT EXISTS mideng_outbox_key_seq ON mideng_outbox (aggregateid, seq);
CREATE INDEX IF NOT EXISTS mideng_outbox_unkeyed ON mideng_outbox (claimed_until) WHERE aggregateid IS NULL AND state = 0;
CREATE INDEX IF NOT EXISTS mideng_outbox_sent ON mideng_outbox (sent_at) WHERE state = 1;
CREATE TABLE IF NOT EXISTS mideng_outbox_keys (aggregateid VARCHAR(255) NOT NULL PRIMARY KEY, last_seq BIGINT NOT NULL, sent_seq BIGINT NOT NULL DEFAULT 0, pending SMALLINT NOT NULL DEFAULT 1, claimed_by VARCHAR(36) NULL, claimed_until DOUBLE PRECISION NULL);
CREATE INDEX IF NOT EXISTS mideng_outbox_keys_pending ON mideng_outbox_keys (claimed_until) WHERE pending = 1;
CREATE INDEX IF NOT EXISTS mideng_outbox_keys_claim ON mideng_outbox_keys (claimed_by);
CREATE OR REPLACE FUNCTION mideng_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify('mideng_outbox', ''); RETURN NULL; END $$;
DROP TRIGGER IF EXISTS mideng_outbox_notify ON mideng_outbox;
CREATE TRIGGER mideng_outbox_notify AFTER INSERT ON mideng_outbox FOR EACH STATEMENT EXECUTE FUNCTION mideng_outbox_notify();
