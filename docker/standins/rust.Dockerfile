# Stand-in for the official `rust:<version>-bookworm` image, built by scripts/docker-base-images.sh
# on a machine that reaches no container registry. Laid out as the official image is (rustup and
# its proxies in CARGO_HOME=/usr/local/cargo, the toolchain in RUSTUP_HOME=/usr/local/rustup, both
# on PATH), with the C toolchain a Rust build needs for its build scripts and linking.
# The context holds `rustup/` and `cargo/`, prepared by the script from this machine's toolchain.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
ARG RUST_VERSION
ENV RUSTUP_HOME=/usr/local/rustup \
    CARGO_HOME=/usr/local/cargo \
    PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    RUST_VERSION=${RUST_VERSION}
COPY rustup /usr/local/rustup
COPY cargo /usr/local/cargo
RUN chmod -R a+w "$RUSTUP_HOME" "$CARGO_HOME" \
 && rustc --version | grep -q "^rustc ${RUST_VERSION} " \
 && cargo --version
