//! Benchmark (not a test): `from_json_slice` and `to_json_vec`, and `from_cbor_slice` and
//! `to_cbor_vec` on the same messages as CBOR (WebSocket binary frames), on the messages of the
//! server's hot path — the bench's `Hello` request, the built-in reasoner's greeting (its text
//! has quotes to escape), and a structured/json request that carries a conversation token.
//!
//! Run with `cargo bench -p parley-nlip --bench codec`. Prints ns per operation for each case.
//! Knobs (environment, read here only): `NLIP_BENCH_ITERS` (iterations per case, default
//! 200000), `NLIP_BENCH_ONLY` (run only the cases whose name contains this string).
//!
//! Instructions per operation, independent of machine load, with callgrind (one case per run,
//! so that the function's call count is the iteration count):
//!
//! ```sh
//! CARGO_TARGET_DIR=/work/target-nlip cargo bench -p parley-nlip --bench codec --no-run
//! NLIP_BENCH_ITERS=10000 NLIP_BENCH_ONLY="decode text request" \
//!   valgrind --tool=callgrind --callgrind-out-file=cg.out \
//!   /work/target-nlip/release/deps/codec-<hash> --bench
//! callgrind_annotate --inclusive=yes cg.out | grep from_json_slice
//! ```
//!
//! and divide the inclusive count by `NLIP_BENCH_ITERS`.

use std::hint::black_box;
use std::time::Instant;

use parley_nlip::{Message, from_cbor_slice, from_json_slice, to_cbor_vec, to_json_vec};

/// The request the HTTP bench sends (tests/benches/nlip-post.lua).
const TEXT_REQUEST: &[u8] = br#"{"format":"text","subformat":"english","content":"Hello"}"#;

/// The built-in reasoner's answer to `Hello`, as the server writes it.
const TEXT_REPLY: &[u8] = br#"{"format":"text","subformat":"english","content":"Hello, this is Acme product desk. I can: getOrderStatus, getProductInfo. Send \"help\" to see how to call them."}"#;

/// Structured content and a conversation token submessage.
const STRUCTURED_REQUEST: &[u8] = br#"{"format":"structured","subformat":"json","content":{"order":"A-1042","items":[{"sku":"X-1","qty":2},{"sku":"Y-7","qty":1}],"express":true,"note":null},"submessages":[{"format":"token","subformat":"conversation_parley","content":"7f3a9b2c-41d8"}]}"#;

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this without it.
    if !std::env::args().any(|a| a == "--bench") {
        println!("codec benchmark skipped: run it with `cargo bench -p parley-nlip --bench codec`");
        return;
    }
    let iters: u32 = std::env::var("NLIP_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let only = std::env::var("NLIP_BENCH_ONLY").unwrap_or_default();

    let messages = [
        ("text request", TEXT_REQUEST),
        ("text reply", TEXT_REPLY),
        ("structured+token", STRUCTURED_REQUEST),
    ];
    println!("{iters} iterations per case");
    for (name, bytes) in messages {
        let message: Message = from_json_slice(bytes).expect("the bench's messages are valid");
        // The encoder's output is the canonical form of the same message: the bench's inputs
        // are written canonically, so decoding and encoding measure the same document.
        assert_eq!(to_json_vec(&message), bytes, "{name} is not canonical");

        let decode = format!("decode {name}");
        if decode.contains(&only) {
            report(&decode, iters, || {
                black_box(from_json_slice(black_box(bytes)).is_ok());
            });
        }
        let encode = format!("encode {name}");
        if encode.contains(&only) {
            report(&encode, iters, || {
                black_box(to_json_vec(black_box(&message)));
            });
        }
        // The same message as CBOR, as WebSocket binary frames carry it.
        let cbor = to_cbor_vec(&message);
        let decode = format!("decode {name}, CBOR");
        if decode.contains(&only) {
            report(&decode, iters, || {
                black_box(from_cbor_slice(black_box(&cbor)).is_ok());
            });
        }
        let encode = format!("encode {name}, CBOR");
        if encode.contains(&only) {
            report(&encode, iters, || {
                black_box(to_cbor_vec(black_box(&message)));
            });
        }
    }
}

fn report(name: &str, iters: u32, mut op: impl FnMut()) {
    let start = Instant::now();
    for _ in 0..iters {
        op();
    }
    let ns = start.elapsed().as_nanos() as f64 / f64::from(iters);
    println!("{name:<28} {ns:>8.1} ns/op");
}
