-- 0010: handlers.compiled — a handler's compiled form.
--
-- The built-in reasoner generates a handler's JavaScript from a mapping (protocol fields onto one
-- capability). The mapping itself, as JSON, is the handler's compiled form: the sandbox's mapping
-- runtime serves it without a JavaScript engine. The provider attaches it only after the JavaScript
-- passed verification and the mapping gave the same answers on every test case; NULL = the
-- JavaScript alone serves (handlers written by a language model, or a mapping that differed).
--
-- TEXT, not JSONB: JSONB reorders an object's keys, and a mapping's constants and allowed values must
-- come back in their exact order (answers are written in it, structured enum values are compared as
-- JSON text, as the JavaScript does).
ALTER TABLE handlers ADD COLUMN compiled TEXT
    CHECK (compiled IS NULL OR jsonb_typeof(compiled::jsonb) = 'object');
