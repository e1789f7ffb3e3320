# Stand-in for the official `postgres` image, built by scripts/docker-base-images.sh on a machine
# that reaches no container registry: Debian's PostgreSQL and an entry point of our own that
# honours what docker-compose.yml relies on (POSTGRES_PASSWORD, /docker-entrypoint-initdb.d/*.sql
# on first start, port 5432 on every address, pg_isready on PATH, PGDATA a volume).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
ARG PG_MAJOR=15
# The package would create and start a cluster of its own; the entry point creates one in PGDATA.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-common \
 && sed -ri 's/#(create_main_cluster) .*$/\1 = false/' /etc/postgresql-common/createcluster.conf \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "postgresql-${PG_MAJOR}" \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /docker-entrypoint-initdb.d /var/run/postgresql \
 && chown postgres:postgres /var/run/postgresql
ENV PATH=/usr/lib/postgresql/${PG_MAJOR}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
VOLUME /var/lib/postgresql/data
ENTRYPOINT ["docker-entrypoint.sh"]
# SIGINT is PostgreSQL's fast shutdown: sessions are ended, the server stops cleanly.
STOPSIGNAL SIGINT
EXPOSE 5432
CMD ["postgres"]
