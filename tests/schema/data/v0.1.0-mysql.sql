-- The tables mideng 0.1.0 created (record table mideng_records, its steps table and the
-- outbox mideng_outbox) on mysql, before schema versions: one statement per ';' at a line's end.
CREATE TABLE IF NOT EXISTS mideng_records (
    scope VARBINARY(600) NOT NULL,
    `key` VARBINARY(1020) NOT NULL,
    status VARCHAR(16) NOT NULL,
    fence BIGINT NOT NULL,
    owner VARBINARY(255) NOT NULL,
    fingerprint VARCHAR(128) NULL,
    lease_until DOUBLE NULL,
    result LONGBLOB NULL,
    codec VARCHAR(64) NULL,
    error LONGBLOB NULL,
    attempts INT NOT NULL DEFAULT 1,
    request_id VARCHAR(255) NULL,
    created_at DOUBLE NOT NULL,
    updated_at DOUBLE NOT NULL,
    expires_at DOUBLE NULL,
    PRIMARY KEY (scope, `key`),
    KEY mideng_records_expires (expires_at),
    KEY mideng_records_open (status, lease_until)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS mideng_records_steps (scope VARBINARY(600) NOT NULL, `key` VARBINARY(1020) NOT NULL, step VARBINARY(400) NOT NULL, result LONGBLOB NULL, codec VARCHAR(64) NULL, at DOUBLE NOT NULL, PRIMARY KEY (scope, `key`, step)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS mideng_outbox (id VARCHAR(36) NOT NULL PRIMARY KEY, aggregatetype VARCHAR(255) NOT NULL, aggregateid VARCHAR(255) NULL, type VARCHAR(255) NOT NULL, payload LONGBLOB NOT NULL, destination VARCHAR(255) NOT NULL, headers LONGTEXT NOT NULL, request_id VARCHAR(255) NULL, seq BIGINT NULL, created_at DOUBLE NOT NULL, state SMALLINT NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0, last_error LONGTEXT NULL, sent_at DOUBLE NULL, claimed_by VARCHAR(36) NULL, claimed_until DOUBLE NULL, UNIQUE KEY mideng_outbox_key_seq (aggregateid, seq), KEY mideng_outbox_unkeyed (state, aggregateid, claimed_until), KEY mideng_outbox_sent (state, sent_at)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
CREATE TABLE IF NOT EXISTS mideng_outbox_keys (aggregateid VARCHAR(255) NOT NULL PRIMARY KEY, last_seq BIGINT NOT NULL, sent_seq BIGINT NOT NULL DEFAULT 0, pending SMALLINT NOT NULL DEFAULT 1, claimed_by VARCHAR(36) NULL, claimed_until DOUBLE NULL, KEY mideng_outbox_keys_pending (pending, claimed_until), KEY mideng_outbox_keys_claim (claimed_by)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
