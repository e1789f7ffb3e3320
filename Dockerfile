# Builds the `parley` binary with its sandbox runtime, then ships it on a slim base.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN scripts/setup-guest.sh \
 && cargo build --release --locked -p parley \
 && cp target/release/parley /usr/local/bin/parley

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /usr/local/bin/parley /usr/local/bin/parley
COPY examples /etc/parley/examples
ENV PARLEY_LISTEN=0.0.0.0:8080 \
    PARLEY_UPLOAD_LISTEN=0.0.0.0:8081 \
    PARLEY_DATA_DIR=/var/lib/parley
VOLUME /var/lib/parley
EXPOSE 8080 8081
HEALTHCHECK --interval=10s --timeout=3s CMD curl -fsS http://127.0.0.1:8080/health || exit 1
ENTRYPOINT ["parley"]
CMD ["serve"]
