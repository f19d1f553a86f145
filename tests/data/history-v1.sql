BEGIN TRANSACTION;
CREATE TABLE conversations (
        id            INTEGER PRIMARY KEY,
        title         TEXT NOT NULL DEFAULT '',
        created       TEXT NOT NULL,
        updated       TEXT NOT NULL,
        target        TEXT NOT NULL DEFAULT '',
        draft         TEXT NOT NULL DEFAULT '',
        system_prompt TEXT NOT NULL DEFAULT ''
    );
INSERT INTO "conversations" VALUES(1,'What is [bold]speculative[/] decoding?','2025-01-02T10:00:00+00:00','2025-01-02T10:00:02+00:00','SmolLM2-135M-Instruct-Q4_1.gguf','ngram','');
INSERT INTO "conversations" VALUES(3,'second kept chat','2025-01-04T10:00:00+00:00','2025-01-04T10:00:02+00:00','t.gguf','none','');
CREATE TABLE messages (
        id              INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        idx             INTEGER NOT NULL CHECK (idx >= 0),
        role            TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
        content         TEXT NOT NULL,
        tokens          TEXT NOT NULL DEFAULT '[]',
        kinds           TEXT NOT NULL DEFAULT '[]',
        stopped         INTEGER NOT NULL DEFAULT 0,
        created         TEXT NOT NULL,
        UNIQUE (conversation_id, idx)
    );
INSERT INTO "messages" VALUES(1,1,0,'system','be brief','[]','[]',0,'2025-01-02T10:00:00+00:00');
INSERT INTO "messages" VALUES(2,1,1,'user','What is [bold]speculative[/] decoding?','[]','[]',0,'2025-01-02T10:00:01+00:00');
INSERT INTO "messages" VALUES(3,1,2,'assistant','abc','[1, 2, 3]','["accepted", "corrected", "bonus"]',0,'2025-01-02T10:00:02+00:00');
INSERT INTO "messages" VALUES(5,3,0,'user','second kept chat','[]','[]',0,'2025-01-04T10:00:01+00:00');
INSERT INTO "messages" VALUES(6,3,1,'assistant','ab','[1, 2]','["accepted", "corrected"]',1,'2025-01-04T10:00:02+00:00');
CREATE TABLE turn_stats (
        message_id           INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
        target               TEXT,
        drafter              TEXT NOT NULL DEFAULT '',
        k                    INTEGER NOT NULL DEFAULT 0,
        auto_k               INTEGER,
        speculative          INTEGER NOT NULL DEFAULT 0,
        sampling             TEXT,
        prompt_n             INTEGER NOT NULL,
        prompt_ms            REAL,
        predicted_n          INTEGER NOT NULL,
        predicted_ms         REAL,
        predicted_per_second REAL,
        draft_n              INTEGER NOT NULL,
        draft_n_accepted     INTEGER NOT NULL,
        acceptance           REAL,
        mean_len             REAL,
        accepted_per_pos     TEXT NOT NULL DEFAULT '[]',
        draft_ms_per_step    REAL,
        verify_ms_per_step   REAL,
        overhead_ms          REAL,
        step_ms              REAL,
        n_steps              INTEGER NOT NULL,
        n_spec_steps         INTEGER NOT NULL,
        stop_reason          TEXT NOT NULL,
        turn_text            TEXT,
        turn_tokens          TEXT,
        turn_kinds           TEXT,
        extra                TEXT
    );
INSERT INTO "turn_stats" VALUES(3,'SmolLM2-135M-Instruct-Q4_1.gguf','ngram',3,1,1,'{"temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 7}',12,30.5,3,100.0,30.0,8,5,0.625,2.25,'[0.75, 0.5, NaN]',0.5,20.0,1.5,90.0,4,4,'eos',NULL,NULL,NULL,NULL);
INSERT INTO "turn_stats" VALUES(6,'t.gguf','ngram',4,0,1,NULL,12,30.5,2,100.0,20.0,8,5,0.625,2.25,'[0.75, 0.5, NaN]',0.5,20.0,1.5,90.0,4,4,'eos',NULL,NULL,NULL,NULL);
CREATE INDEX conversations_by_updated ON conversations(updated);
COMMIT;
