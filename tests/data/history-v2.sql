BEGIN TRANSACTION;
CREATE TABLE "conversations" (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        title         TEXT NOT NULL DEFAULT '',
        created       TEXT NOT NULL,
        updated       TEXT NOT NULL,
        target        TEXT NOT NULL DEFAULT '',
        draft         TEXT NOT NULL DEFAULT '',
        system_prompt TEXT NOT NULL DEFAULT ''
    );
INSERT INTO "conversations" VALUES(1,'Name a colour.','2025-02-01T10:00:07+00:00','2025-02-01T10:00:07+00:00','SmolLM2-135M-Instruct.Q4_1.gguf','ngram','be brief');
INSERT INTO "conversations" VALUES(2,'only a question','2025-02-01T10:00:07+00:00','2025-02-01T10:00:07+00:00','x.gguf','none','');
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
INSERT INTO "messages" VALUES(1,1,0,'system','be brief','[]','[]',0,'2025-02-01T10:00:07+00:00');
INSERT INTO "messages" VALUES(2,1,1,'user','Name a colour.','[]','[]',0,'2025-02-01T10:00:07+00:00');
INSERT INTO "messages" VALUES(3,1,2,'assistant','Green.','[12, 11]','["plain", "plain"]',0,'2025-02-01T10:00:07+00:00');
INSERT INTO "messages" VALUES(4,1,3,'user','Another?','[]','[]',0,'2025-02-01T10:00:07+00:00');
INSERT INTO "messages" VALUES(5,1,4,'assistant','Red','[13]','["plain"]',1,'2025-02-01T10:00:07+00:00');
INSERT INTO "messages" VALUES(6,2,0,'user','only a question','[]','[]',0,'2025-02-01T10:00:07+00:00');
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
INSERT INTO "turn_stats" VALUES(3,'SmolLM2-135M-Instruct.Q4_1.gguf','ngram',4,0,1,'{"temperature": 0.0, "top_k": 40, "top_p": 0.95, "seed": null}',20,12.5,2,80.0,25.0,0,0,0.0,1.0,'[0.75, 0.5]',0.1,9.0,1.0,80.0,2,2,'eos',NULL,NULL,'["accepted", "accepted"]','{"k_min": 2, "k_max": 4}');
INSERT INTO "turn_stats" VALUES(5,'SmolLM2-135M-Instruct.Q4_1.gguf','ngram',4,0,1,'{"temperature": 0.0, "top_k": 40, "top_p": 0.95, "seed": null}',20,12.5,1,80.0,12.5,0,0,0.0,1.0,'[0.75, 0.5]',0.1,9.0,1.0,80.0,2,2,'stopped',NULL,NULL,'["accepted"]','{"k_min": 2, "k_max": 4}');
CREATE INDEX conversations_by_updated ON conversations(updated);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('conversations',3);
COMMIT;
