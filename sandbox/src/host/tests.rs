//! The WASI shim and the import policy, exercised by a hand-assembled module (no JavaScript in
//! between): what a compromised runtime could reach is exactly what these functions allow.

use super::wasi::{ERRNO_BADF, ERRNO_SUCCESS};
use super::*;
use crate::LogLevel;
use crate::config::SandboxConfig;
use crate::{NoCapabilities, engine};

fn leb(mut value: u32, out: &mut Vec<u8>) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn name(text: &str, out: &mut Vec<u8>) {
    leb(text.len() as u32, out);
    out.extend_from_slice(text.as_bytes());
}

fn section(id: u8, body: Vec<u8>, out: &mut Vec<u8>) {
    out.push(id);
    leb(body.len() as u32, out);
    out.extend(body);
}

/// Imports `sock_accept` (not provided by the host), `fd_write` and `environ_sizes_get`; exports
/// functions that call each.
fn probe_module() -> Vec<u8> {
    const I32: u8 = 0x7f;
    let mut wasm = b"\0asm\x01\0\0\0".to_vec();
    let types = [
        vec![0x60, 3, I32, I32, I32, 1, I32],
        vec![0x60, 4, I32, I32, I32, I32, 1, I32],
        vec![0x60, 2, I32, I32, 1, I32],
        vec![0x60, 0, 1, I32],
    ];
    let mut body = vec![types.len() as u8];
    types.iter().for_each(|t| body.extend(t));
    section(1, body, &mut wasm);

    let mut body = vec![3];
    for (field, ty) in [
        ("sock_accept", 0),
        ("fd_write", 1),
        ("environ_sizes_get", 2),
    ] {
        name("wasi_snapshot_preview1", &mut body);
        name(field, &mut body);
        body.extend([0x00, ty]);
    }
    section(2, body, &mut wasm);
    section(3, vec![4, 3, 3, 3, 3], &mut wasm);
    section(5, vec![1, 0x00, 1], &mut wasm);

    let mut body = vec![5];
    name("memory", &mut body);
    body.extend([0x02, 0]);
    for (export, index) in [
        ("accept", 3),
        ("write_fd3", 4),
        ("write_stdout", 5),
        ("env_count", 6),
    ] {
        name(export, &mut body);
        body.extend([0x00, index]);
    }
    section(7, body, &mut wasm);

    let bodies: [&[u8]; 4] = [
        // sock_accept(0, 0, 0)
        &[0x00, 0x41, 0, 0x41, 0, 0x41, 0, 0x10, 0, 0x0b],
        // fd_write(3, iovs 0, 1 iovec, nwritten at 48)
        &[0x00, 0x41, 3, 0x41, 0, 0x41, 1, 0x41, 48, 0x10, 1, 0x0b],
        // fd_write(1, iovs 0, 1 iovec, nwritten at 48)
        &[0x00, 0x41, 1, 0x41, 0, 0x41, 1, 0x41, 48, 0x10, 1, 0x0b],
        // mem[64] = 99; environ_sizes_get(64, 68); return mem[64]
        &[
            0x00, 0x41, 0xc0, 0x00, 0x41, 0xe3, 0x00, 0x36, 2, 0, 0x41, 0xc0, 0x00, 0x41, 0xc4,
            0x00, 0x10, 2, 0x1a, 0x41, 0xc0, 0x00, 0x28, 2, 0, 0x0b,
        ],
    ];
    let mut body = vec![bodies.len() as u8];
    for code in bodies {
        leb(code.len() as u32, &mut body);
        body.extend_from_slice(code);
    }
    section(10, body, &mut wasm);

    // Data: an iovec {ptr 32, len 5} at 0 and "hello" at 32.
    let mut data = vec![32, 0, 0, 0, 5, 0, 0, 0];
    data.resize(32, 0);
    data.extend_from_slice(b"hello");
    let mut body = vec![1, 0x00, 0x41, 0, 0x0b];
    leb(data.len() as u32, &mut body);
    body.extend(data);
    section(11, body, &mut wasm);
    wasm
}

fn call(export: &str) -> (wasmtime::Result<i32>, CallState) {
    let config = SandboxConfig::default();
    let engine = engine::call_engine(&config).expect("engine");
    let mut linker = linker(&engine, Phase::Call).expect("linker");
    let module = wasmtime::Module::new(&engine, probe_module()).expect("valid probe module");
    linker
        .define_unknown_imports_as_traps(&module)
        .expect("trap stubs");
    let state = CallState::new(
        Phase::Call,
        crate::call::limits(&config, config.deadline_ms),
        Grants::none(),
        Arc::new(NoCapabilities),
        1,
    );
    let mut store = wasmtime::Store::new(&engine, state);
    store.set_epoch_deadline(1_000_000);
    let result = futures::executor::block_on(async {
        let instance = linker
            .instantiate_async(&mut store, &module)
            .await
            .expect("an unknown import does not fail instantiation");
        let func = instance
            .get_typed_func::<(), i32>(&mut store, export)
            .expect("export exists");
        func.call_async(&mut store, ()).await
    });
    (result, store.into_data())
}

#[test]
fn undefined_imports_trap_when_called() {
    let (result, _) = call("accept");
    let error = result.expect_err("sock_accept is not provided");
    assert!(format!("{error:#}").contains("sock_accept"), "{error:#}");
}

#[test]
fn only_stdout_and_stderr_exist_and_they_are_captured() {
    let (result, state) = call("write_fd3");
    assert_eq!(result.expect("returns an errno"), ERRNO_BADF);
    assert!(state.logs.is_empty());

    let (result, state) = call("write_stdout");
    assert_eq!(result.expect("returns an errno"), ERRNO_SUCCESS);
    assert_eq!(state.logs.len(), 1);
    assert_eq!(state.logs[0].text, "hello");
    assert_eq!(state.logs[0].level, LogLevel::Info);
}

#[test]
fn the_environment_is_empty() {
    let (result, _) = call("env_count");
    assert_eq!(result.expect("returns the count"), 0);
}
