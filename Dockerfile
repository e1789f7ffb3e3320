# Builds the `parley` binary and ships it (as the release profile builds it: no debug info, symbols
# kept, so backtraces name functions) on a slim Debian, run by a user without privileges. Needs
# BuildKit (Docker 23 and later build with it by default): the build keeps cargo's registry and
# target directory in cache mounts, so a source change recompiles only what changed.
#
# The base images are build arguments (a mirror's, or local stand-ins: scripts/docker-base-images.sh).
# The Rust image carries the toolchain rust-toolchain.toml pins (rustc 1.95.0); the build needs
# nothing else (the sandbox's guest runtimes are committed, in sandbox/runtimes/).
ARG RUST_IMAGE=rust:1.95.0-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
# A directory of the build context holding the workspace's crates from `cargo vendor`: set, the
# build reads crates from it and not from a registry (scripts/compose-story.sh --offline, for an
# engine whose builds reach no crate registry). Empty, crates come from crates.io.
ARG CARGO_VENDOR_DIR=
WORKDIR /src
COPY . .
# The target directory is a cache mount kept across builds, and cargo decides what to rebuild by
# file times: a source whose time is older than the cached build of other content (a file
# written while an earlier build ran) would be skipped. The build touches the workspace's own
# sources first, so its crates are always rebuilt (minutes) and the dependencies stay cached.
RUN --mount=type=cache,id=parley-cargo-registry,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=parley-target,target=/build/target,sharing=locked \
    set -eu; \
    if [ -n "$CARGO_VENDOR_DIR" ]; then \
      set -- --offline --config "source.crates-io.replace-with='vendored'" \
        --config "source.vendored.directory='/src/$CARGO_VENDOR_DIR'"; \
    fi; \
    find services negotiator sandbox/src sandbox/guest-abi tests -name '*.rs' -exec touch {} +; \
    cargo build --release --locked -p parley --target-dir /build/target "$@"; \
    install -D -m 0755 /build/target/release/parley /out/parley

FROM ${RUNTIME_IMAGE}
# The system's CA certificates are what an https model end-point is verified against.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/parley /usr/local/bin/parley
COPY docker/healthcheck.sh /usr/local/bin/parley-healthcheck
COPY examples /etc/parley/examples
RUN groupadd --system --gid 10001 parley \
 && useradd --system --uid 10001 --gid parley --home-dir /var/lib/parley --shell /usr/sbin/nologin parley \
 && install -d -o parley -g parley -m 0750 /var/lib/parley
ENV PARLEY_LISTEN=0.0.0.0:8080 \
    PARLEY_UPLOAD_LISTEN=0.0.0.0:8081 \
    PARLEY_DATA_DIR=/var/lib/parley
USER parley
WORKDIR /var/lib/parley
# The embedded database when no PARLEY_DATABASE_URL is given, and the sandbox's compiled runtime.
VOLUME /var/lib/parley
EXPOSE 8080 8081
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["parley-healthcheck"]
ENTRYPOINT ["parley"]
CMD ["serve"]
