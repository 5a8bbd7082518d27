-- Knowledge ids live in each scope's own namespace: an id one user chose
-- never meets another's, so no save can tell whether another scope holds
-- it. Every id stored so far was unique over the table, so each stays
-- unique within its scope.
ALTER TABLE knowledge DROP CONSTRAINT knowledge_pkey;
ALTER TABLE knowledge ADD PRIMARY KEY (scope, id);
CREATE INDEX knowledge_id ON knowledge (id);
