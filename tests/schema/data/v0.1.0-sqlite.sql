-- The tables mideng 0.1.0 created (record table mideng_records, its steps table and the
-- outbox mideng_outbox) on sqlite, before schema versions: one statement per ';' at a line's end.
CREATE TABLE IF NOT EXISTS mideng_records (
            scope TEXT NOT NULL, key TEXT NOT NULL, status TEXT NOT NULL,
            fence INTEGER NOT NULL, owner TEXT NOT NULL, fingerprint TEXT,
            lease_until REAL, result BLOB, codec TEXT, error BLOB,
            attempts INTEGER NOT NULL DEFAULT 1, request_id TEXT,
            created_at REAL NOT NULL, updated_at REAL NOT NULL, expires_at REAL,
            PRIMARY KEY (scope, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mideng_records_steps (scope TEXT NOT NULL, key TEXT NOT NULL, step TEXT NOT NULL, result BLOB, codec TEXT, at REAL NOT NULL, PRIMARY KEY (scope, key, step)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mideng_outbox (id VARCHAR(36) NOT NULL PRIMARY KEY, aggregatetype VARCHAR(255) NOT NULL, aggregateid VARCHAR(255) NULL, type VARCHAR(255) NOT NULL, payload BLOB NOT NULL, destination VARCHAR(255) NOT NULL, headers TEXT NOT NULL, request_id VARCHAR(255) NULL, seq INTEGER NULL, created_at REAL NOT NULL, state SMALLINT NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT NULL, sent_at REAL NULL, claimed_by VARCHAR(36) NULL, claimed_until REAL NULL);
CREATE UNIQUE INDEX IF NOT EXISTS mideng_outbox_key_seq ON mideng_outbox (aggregateid, seq);
CREATE INDEX IF NOT EXISTS mideng_outbox_unkeyed ON mideng_outbox (state, aggregateid, claimed_until);
CREATE INDEX IF NOT EXISTS mideng_outbox_sent ON mideng_outbox (state, sent_at);
CREATE TABLE IF NOT EXISTS mideng_outbox_keys (aggregateid VARCHAR(255) NOT NULL PRIMARY KEY, last_seq INTEGER NOT NULL, sent_seq INTEGER NOT NULL DEFAULT 0, pending SMALLINT NOT NULL DEFAULT 1, claimed_by VARCHAR(36) NULL, claimed_until REAL NULL);
CREATE INDEX IF NOT EXISTS mideng_outbox_keys_pending ON mideng_outbox_keys (pending, claimed_until);
CREATE INDEX IF NOT EXISTS mideng_outbox_keys_claim ON mideng_outbox_keys (claimed_by);
