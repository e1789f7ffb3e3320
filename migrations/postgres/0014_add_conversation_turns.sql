-- 0014: conversations.turns — how many messages the peer has sent in a conversation.
--
-- One turn per peer message the server handled (an inbound entry of the log), counted in the same
-- statement that hands the log entry its sequence number, so reading it costs nothing and it stays
-- exact after the log's oldest messages were trimmed. Rows that exist already count the inbound
-- messages their log still holds: a lower bound where it was trimmed.
ALTER TABLE conversations ADD COLUMN turns BIGINT NOT NULL DEFAULT 0 CHECK (turns >= 0);

UPDATE conversations
   SET turns = (SELECT count(*) FROM conversation_messages m
                 WHERE m.conversation_id = conversations.id AND m.direction = 'inbound');
