-- One database per agent on the shared PostgreSQL server: each agent keeps its own
-- conversations, protocols and handlers, as two organisations' agents would.
CREATE DATABASE provider;
CREATE DATABASE requester;
CREATE DATABASE stations;
