//! The transforms on small hand-encoded modules, and the real runtime's split compiled and
//! instantiated.

use super::image::non_zero_runs;
use super::*;
use wasm_encoder::MemoryType;
use wasm_encoder::{
    CodeSection, ConstExpr, DataCountSection, DataSection, ExportKind, ExportSection, Function,
    FunctionSection, GlobalSection, GlobalType, ImportSection, Instruction, MemorySection, Module,
    TypeSection, ValType as EncodedValType,
};

fn memory(minimum: u64) -> MemoryType {
    MemoryType {
        minimum,
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    }
}

/// A module like the runtime in miniature: one memory with a data segment, a mutable global
/// (a "stack pointer") and two functions, one of which (`body`) the test chooses.
fn module_with(memories: &[MemoryType], body: &[Instruction<'_>], data_count: bool) -> Vec<u8> {
    let mut module = Module::new();
    let mut types = TypeSection::new();
    types.ty().function([], [EncodedValType::I32]);
    module.section(&types);
    let mut functions = FunctionSection::new();
    functions.function(0).function(0);
    module.section(&functions);
    let mut section = MemorySection::new();
    for memory in memories {
        section.memory(*memory);
    }
    module.section(&section);
    let mut globals = GlobalSection::new();
    globals.global(
        GlobalType {
            val_type: EncodedValType::I32,
            mutable: true,
            shared: false,
        },
        &ConstExpr::i32_const(1024),
    );
    globals.global(
        GlobalType {
            val_type: EncodedValType::I32,
            mutable: false,
            shared: false,
        },
        &ConstExpr::i32_const(7),
    );
    module.section(&globals);
    let mut exports = ExportSection::new();
    exports.export("memory", ExportKind::Memory, 0);
    exports.export("read", ExportKind::Func, 0);
    exports.export("other", ExportKind::Func, 1);
    module.section(&exports);
    if data_count {
        module.section(&DataCountSection { count: 1 });
    }
    let mut code = CodeSection::new();
    let mut read = Function::new([]);
    read.instructions()
        .i32_const(16)
        .i32_load(wasm_encoder::MemArg {
            offset: 0,
            align: 2,
            memory_index: 0,
        })
        .end();
    code.function(&read);
    let mut other = Function::new([]);
    for instruction in body {
        other.instruction(instruction);
    }
    code.function(&other);
    module.section(&code);
    let mut data = DataSection::new();
    data.active(0, &ConstExpr::i32_const(16), 42u32.to_le_bytes());
    module.section(&data);
    module.finish()
}

fn plain(memories: &[MemoryType]) -> Vec<u8> {
    module_with(
        memories,
        &[Instruction::I32Const(0), Instruction::End],
        false,
    )
}

fn refusal(wasm: &[u8]) -> String {
    split(wasm).expect_err("must be refused").to_string()
}

#[test]
fn two_memories_or_none_are_refused() {
    assert!(refusal(&plain(&[memory(1), memory(1)])).contains("2 memories"));
    assert!(refusal(&plain(&[])).contains("0 memories"));
}

#[test]
fn code_that_references_data_segments_is_refused() {
    let init = module_with(
        &[memory(1)],
        &[
            Instruction::I32Const(0),
            Instruction::I32Const(0),
            Instruction::I32Const(4),
            Instruction::MemoryInit {
                mem: 0,
                data_index: 0,
            },
            Instruction::I32Const(0),
            Instruction::End,
        ],
        true,
    );
    assert!(refusal(&init).contains("memory.init"));
    let drop = module_with(
        &[memory(1)],
        &[
            Instruction::DataDrop(0),
            Instruction::I32Const(0),
            Instruction::End,
        ],
        true,
    );
    assert!(refusal(&drop).contains("data.drop"));
}

#[test]
fn imported_shared_and_64_bit_memories_are_refused() {
    let mut module = Module::new();
    let mut imports = ImportSection::new();
    imports.import("env", "memory", memory(1));
    module.section(&imports);
    assert!(refusal(&module.finish()).contains("imports a memory"));

    let shared = MemoryType {
        shared: true,
        maximum: Some(2),
        ..memory(1)
    };
    assert!(refusal(&plain(&[shared])).contains("shared"));
    let wide = MemoryType {
        memory64: true,
        ..memory(1)
    };
    assert!(refusal(&plain(&[wide])).contains("64-bit"));
}

/// The split of a small module compiles, links and behaves like the original: the base image
/// carries the data, the code reads it through the imported memory, and the mutable global is
/// exported.
#[test]
fn a_small_module_splits_into_working_code_and_image() {
    let split = split(&plain(&[memory(1)])).expect("splits");
    assert_eq!(split.globals, vec![format!("{GLOBAL_EXPORT_PREFIX}0")]);
    assert_eq!(split.layout.memory.initial, 1);

    let engine = wasmtime::Engine::default();
    let mut store = wasmtime::Store::new(&engine, ());
    let base = wasmtime::Module::new(&engine, &split.base_image).expect("base image compiles");
    let code = wasmtime::Module::new(&engine, &split.code).expect("code compiles");
    let image = wasmtime::Instance::new(&mut store, &base, &[]).expect("base instantiates");
    let memory = image
        .get_memory(&mut store, IMAGE_MEMORY)
        .expect("exports memory");
    let instance = wasmtime::Instance::new(&mut store, &code, &[memory.into()])
        .expect("code instantiates over the image");
    let read = instance
        .get_typed_func::<(), i32>(&mut store, "read")
        .expect("read");
    assert_eq!(read.call(&mut store, ()).expect("runs"), 42);
    let global = instance
        .get_global(&mut store, &split.globals[0])
        .expect("the mutable global is exported");
    assert_eq!(global.get(&mut store).i32(), Some(1024));
    assert!(
        instance
            .get_memory(&mut store, "memory")
            .is_some_and(|m| m.data(&store).as_ptr() == memory.data(&store).as_ptr()),
        "`memory` re-exports the imported memory"
    );

    // A handler image of a changed memory carries the change and the grown size.
    memory.grow(&mut store, 1).expect("grows");
    memory.data_mut(&mut store)[16..20].copy_from_slice(&7u32.to_le_bytes());
    memory.data_mut(&mut store)[70_000] = 1;
    let wasm = split.layout.handler_image(memory.data(&store));
    let mut store = wasmtime::Store::new(&engine, ());
    let image = wasmtime::Module::new(&engine, &wasm).expect("handler image compiles");
    let image = wasmtime::Instance::new(&mut store, &image, &[]).expect("image instantiates");
    let memory = image
        .get_memory(&mut store, IMAGE_MEMORY)
        .expect("exports memory");
    assert_eq!(memory.size(&store), 2);
    assert_eq!(memory.data(&store)[70_000], 1);
    let instance =
        wasmtime::Instance::new(&mut store, &code, &[memory.into()]).expect("instantiates");
    let read = instance
        .get_typed_func::<(), i32>(&mut store, "read")
        .expect("read");
    assert_eq!(read.call(&mut store, ()).expect("runs"), 7);
}

#[test]
fn the_real_runtime_splits() {
    let split = split(crate::RUNTIME_WASM).expect("the embedded runtime splits");
    assert!(!split.globals.is_empty(), "the shadow stack pointer");
    assert!(split.code.len() < crate::RUNTIME_WASM.len());
}

#[test]
fn zero_gaps_shorter_than_the_gap_join_runs() {
    let mut memory = vec![0u8; 10_000];
    memory[10] = 1;
    memory[500] = 2;
    memory[5_000..5_002].copy_from_slice(&[3, 3]);
    memory[9_999] = 4;
    assert_eq!(
        non_zero_runs(&memory, 1024),
        vec![10..501, 5_000..5_002, 9_999..10_000]
    );
    assert_eq!(non_zero_runs(&memory, 100_000), vec![10..10_000]);
    assert!(non_zero_runs(&[0; 100], 1024).is_empty());
}
