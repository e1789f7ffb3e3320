//! The code/data split of the guest runtime: pure wasm-to-wasm transforms, no wasmtime.
//!
//! - [`split`] turns the runtime into a **code module** (the runtime with its linear memory
//!   imported from `parley:image`/`memory`, its data segments removed, and each mutable global also
//!   exported as `parley:global:<index>`) and a **base image** (a module with no code that defines
//!   that memory, with the runtime's own data segments, and exports it).
//! - [`ImageLayout::handler_image`] turns a memory as a handler's top-level code left it into a
//!   **handler image**: the same kind of code-less module, with the memory's contents as data
//!   segments.
//!
//! An image also imports the runtime's host functions and re-exports them as
//! `parley:import:<n>` (the runtime's n-th import), for the code module to import from the image
//! instance. That is for speed: an image is instantiated through an `InstancePre`, which resolves
//! the host functions once per image instead of once per call, and an image that imports them has
//! wasmtime compile the trampolines the code needs to call them.
//!
//! Every section of the code module other than memory, data count, data, imports and exports is
//! copied byte for byte; imports and exports are copied raw with the new entries appended. Since the
//! runtime defines exactly one memory and imports none, the imported memory takes the defined one's
//! index 0, so no instruction or export needs rewriting.

use std::ops::Range;

use wasm_encoder::{Encode, EntityType, MemoryType, RawSection};
use wasmparser::{DataKind, Encoding, Operator, Parser, Payload, TypeRef, ValType};

/// Where the code module imports its memory from.
pub(crate) const IMAGE_MODULE: &str = "parley:image";
/// The name of that import, and of every image's memory export.
pub(crate) const IMAGE_MEMORY: &str = "memory";
/// Prefix of the exports that expose the runtime's mutable globals to the host.
pub(crate) const GLOBAL_EXPORT_PREFIX: &str = "parley:global:";
/// Prefix of an image's re-exports of the host functions, by the runtime's import index.
const IMPORT_EXPORT_PREFIX: &str = "parley:import:";

/// Bytes of a wasm page (custom page sizes are refused).
const WASM_PAGE: usize = 64 * 1024;
/// Zero runs shorter than this are kept inside a data segment rather than splitting it: a segment
/// costs a few bytes of header, and fewer, larger segments keep the module small and quick to parse.
const SEGMENT_GAP: usize = 1024;
/// Most data segments a handler image gets (wasmparser refuses more than 100,000); past it the gap
/// that splits segments grows.
const MAX_SEGMENTS: usize = 10_000;

/// The runtime split into code and data.
#[derive(Debug, Clone)]
pub(crate) struct Split {
    /// The runtime's code, importing its memory (`parley:image`/`memory`) after its host functions.
    pub code: Vec<u8>,
    /// A code-less module defining the runtime's memory with its original data segments.
    pub base_image: Vec<u8>,
    /// What every image looks like.
    pub layout: ImageLayout,
    /// The export names of the runtime's mutable globals, in index order.
    pub globals: Vec<String>,
}

/// The shape shared by the base image and every handler image: the runtime's memory type and host
/// function imports.
#[derive(Debug, Clone)]
pub(crate) struct ImageLayout {
    memory: wasmparser::MemoryType,
    imports: Vec<HostImport>,
}

/// One function the runtime imports from the host.
#[derive(Debug, Clone)]
struct HostImport {
    module: String,
    name: String,
    params: Vec<wasm_encoder::ValType>,
    results: Vec<wasm_encoder::ValType>,
}

/// Why the runtime cannot be split.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the runtime cannot be split into code and memory image: {0}")]
pub(crate) struct SplitError(String);

fn refuse<T>(why: impl Into<String>) -> Result<T, SplitError> {
    Err(SplitError(why.into()))
}

fn parse_error(error: wasmparser::BinaryReaderError) -> SplitError {
    SplitError(format!("invalid wasm: {error}"))
}

/// One section of the code module, in the runtime's order.
enum Piece {
    /// Copied unchanged: section id and the byte range of its contents.
    Raw(u8, Range<usize>),
    /// The import section (the range of its contents, if the runtime has one), plus the memory.
    Imports(Option<Range<usize>>),
    /// The export section (likewise), plus the mutable globals.
    Exports(Option<Range<usize>>),
}

impl Piece {
    /// The position of a section in the canonical order (custom sections: 0, anywhere).
    fn rank(&self) -> u8 {
        match self {
            Piece::Raw(id, _) => match id {
                0 => 0,
                1 => 1,
                2 => 2,
                3 => 3,
                4 => 4,
                5 => 5,
                13 => 6, // tags come between memories and globals
                6 => 7,
                7 => 8,
                8 => 9,
                9 => 10,
                12 => 11,
                10 => 12,
                _ => 13,
            },
            Piece::Imports(_) => 2,
            Piece::Exports(_) => 8,
        }
    }
}

/// Places a section that the runtime lacks before the first one that must follow it.
fn insert_in_order(pieces: &mut Vec<Piece>, piece: Piece) {
    let rank = piece.rank();
    let at = pieces
        .iter()
        .position(|p| p.rank() > rank)
        .unwrap_or(pieces.len());
    pieces.insert(at, piece);
}

/// Splits `runtime` into a code module and a base memory image; see the module docs. Refuses a
/// runtime that imports a memory, defines other than one memory, has a shared, 64-bit or
/// custom-page-size memory, references data segments from code (`memory.init`, `data.drop`), has
/// data segments whose offset is not a constant, imports anything but functions, has a mutable
/// global that is not a number, or already uses the reserved import module or export names.
pub(crate) fn split(runtime: &[u8]) -> Result<Split, SplitError> {
    let mut pieces = Vec::new();
    let mut memories = Vec::new();
    let mut mutable_globals = Vec::new();
    let mut types: Vec<wasmparser::FuncType> = Vec::new();
    let mut host_imports = Vec::new();
    let mut data: Option<Range<usize>> = None;
    let (mut imports, mut exports) = (None, None);
    for payload in Parser::new(0).parse_all(runtime) {
        match payload.map_err(parse_error)? {
            Payload::Version { encoding, .. } => {
                if encoding != Encoding::Module {
                    return refuse("it is a component, not a core module");
                }
            }
            Payload::ImportSection(reader) => {
                let range = reader.range();
                for import in reader.into_imports() {
                    let import = import.map_err(parse_error)?;
                    if import.module == IMAGE_MODULE {
                        return refuse(format!(
                            "it already imports from the reserved module `{IMAGE_MODULE}`"
                        ));
                    }
                    match import.ty {
                        TypeRef::Memory(_) => {
                            return refuse(format!(
                                "it imports a memory (`{}`/`{}`)",
                                import.module, import.name
                            ));
                        }
                        TypeRef::Func(index) => {
                            let Some(ty) = types.get(index as usize) else {
                                return refuse("an import has an unknown type");
                            };
                            let convert = |types: &[ValType]| -> Result<Vec<_>, SplitError> {
                                types.iter().map(|ty| encoder_type(*ty)).collect()
                            };
                            host_imports.push(HostImport {
                                module: import.module.to_string(),
                                name: import.name.to_string(),
                                params: convert(ty.params())?,
                                results: convert(ty.results())?,
                            });
                        }
                        _ => {
                            return refuse(format!(
                                "it imports `{}`/`{}`, which is not a function",
                                import.module, import.name
                            ));
                        }
                    }
                }
                imports = Some(range.clone());
                pieces.push(Piece::Imports(Some(range)));
            }
            Payload::MemorySection(reader) => {
                for memory in reader {
                    memories.push(memory.map_err(parse_error)?);
                }
            }
            Payload::GlobalSection(reader) => {
                let range = reader.range();
                for (index, global) in reader.into_iter().enumerate() {
                    let global = global.map_err(parse_error)?;
                    if !global.ty.mutable {
                        continue;
                    }
                    // No globals are imported (only functions are accepted).
                    let index = index as u32;
                    if !matches!(
                        global.ty.content_type,
                        ValType::I32 | ValType::I64 | ValType::F32 | ValType::F64
                    ) || global.ty.shared
                    {
                        return refuse(format!(
                            "its mutable global {index} is not an unshared number"
                        ));
                    }
                    mutable_globals.push(index);
                }
                pieces.push(Piece::Raw(6, range));
            }
            Payload::ExportSection(reader) => {
                let range = reader.range();
                for export in reader {
                    let export = export.map_err(parse_error)?;
                    if export.name.starts_with(GLOBAL_EXPORT_PREFIX) {
                        return refuse(format!(
                            "its export `{}` uses the reserved prefix `{GLOBAL_EXPORT_PREFIX}`",
                            export.name
                        ));
                    }
                }
                exports = Some(range.clone());
                pieces.push(Piece::Exports(Some(range)));
            }
            Payload::DataCountSection { .. } => {}
            Payload::DataSection(reader) => {
                let range = reader.range();
                for segment in reader {
                    let segment = segment.map_err(parse_error)?;
                    if let DataKind::Active {
                        memory_index,
                        offset_expr,
                    } = segment.kind
                    {
                        let mut ops = offset_expr.get_operators_reader();
                        let constant = matches!(ops.read(), Ok(Operator::I32Const { .. }))
                            && matches!(ops.read(), Ok(Operator::End))
                            && ops.eof();
                        if memory_index != 0 || !constant {
                            return refuse(
                                "a data segment is not at a constant offset of memory 0",
                            );
                        }
                    }
                }
                data = Some(range);
            }
            Payload::CodeSectionEntry(body) => {
                let mut ops = body.get_operators_reader().map_err(parse_error)?;
                while !ops.eof() {
                    match ops.read().map_err(parse_error)? {
                        Operator::MemoryInit { .. } | Operator::DataDrop { .. } => {
                            return refuse(
                                "its code references data segments (memory.init or data.drop)",
                            );
                        }
                        _ => {}
                    }
                }
            }
            Payload::TypeSection(reader) => {
                pieces.push(Piece::Raw(1, reader.range()));
                for ty in reader.into_iter_err_on_gc_types() {
                    types.push(ty.map_err(parse_error)?);
                }
            }
            Payload::FunctionSection(reader) => pieces.push(Piece::Raw(3, reader.range())),
            Payload::TableSection(reader) => pieces.push(Piece::Raw(4, reader.range())),
            Payload::TagSection(reader) => pieces.push(Piece::Raw(13, reader.range())),
            Payload::StartSection { range, .. } => pieces.push(Piece::Raw(8, range)),
            Payload::ElementSection(reader) => pieces.push(Piece::Raw(9, reader.range())),
            Payload::CodeSectionStart { range, .. } => pieces.push(Piece::Raw(10, range)),
            Payload::CustomSection(reader) => pieces.push(Piece::Raw(0, reader.range())),
            Payload::End(_) => break,
            _ => return refuse("it has a section this transform does not know"),
        }
    }

    let memory = match memories.as_slice() {
        [memory] => *memory,
        other => {
            return refuse(format!(
                "it defines {} memories; exactly one is needed",
                other.len()
            ));
        }
    };
    if memory.shared || memory.memory64 || memory.page_size_log2.is_some() {
        return refuse("its memory is shared, 64-bit or has a custom page size");
    }
    let memory_type = encoder_memory(&memory, memory.initial);
    if imports.is_none() {
        insert_in_order(&mut pieces, Piece::Imports(None));
    }
    if exports.is_none() {
        insert_in_order(&mut pieces, Piece::Exports(None));
    }

    let globals: Vec<String> = mutable_globals
        .iter()
        .map(|index| format!("{GLOBAL_EXPORT_PREFIX}{index}"))
        .collect();
    let mut code = wasm_encoder::Module::new();
    for piece in &pieces {
        match piece {
            Piece::Raw(id, range) => code.section(&RawSection {
                id: *id,
                data: &runtime[range.clone()],
            }),
            Piece::Imports(range) => {
                let mut entry = Vec::new();
                IMAGE_MODULE.encode(&mut entry);
                IMAGE_MEMORY.encode(&mut entry);
                EntityType::Memory(memory_type).encode(&mut entry);
                let body = append(runtime, range.as_ref(), &[entry])?;
                code.section(&RawSection { id: 2, data: &body })
            }
            Piece::Exports(range) => {
                let entries: Vec<Vec<u8>> = globals
                    .iter()
                    .zip(&mutable_globals)
                    .map(|(name, index)| {
                        let mut entry = Vec::new();
                        name.as_str().encode(&mut entry);
                        wasm_encoder::ExportKind::Global.encode(&mut entry);
                        index.encode(&mut entry);
                        entry
                    })
                    .collect();
                let body = append(runtime, range.as_ref(), &entries)?;
                code.section(&RawSection { id: 7, data: &body })
            }
        };
    }

    let layout = ImageLayout {
        memory,
        imports: host_imports,
    };
    let mut base = layout.module(memory.initial);
    if let Some(range) = data {
        base.section(&RawSection {
            id: 11,
            data: &runtime[range],
        });
    }
    Ok(Split {
        code: code.finish(),
        base_image: base.finish(),
        layout,
        globals,
    })
}

/// A value type for wasm-encoder; only numbers and vectors are expected in host functions.
fn encoder_type(ty: ValType) -> Result<wasm_encoder::ValType, SplitError> {
    Ok(match ty {
        ValType::I32 => wasm_encoder::ValType::I32,
        ValType::I64 => wasm_encoder::ValType::I64,
        ValType::F32 => wasm_encoder::ValType::F32,
        ValType::F64 => wasm_encoder::ValType::F64,
        ValType::V128 => wasm_encoder::ValType::V128,
        ValType::Ref(_) => return refuse("a host function takes or returns a reference"),
    })
}

/// A vector section's contents with `extra` entries appended: the count is rewritten, the original
/// entries are copied raw.
fn append(
    wasm: &[u8],
    contents: Option<&Range<usize>>,
    extra: &[Vec<u8>],
) -> Result<Vec<u8>, SplitError> {
    let (count, entries) = match contents {
        Some(range) => {
            let mut reader = wasmparser::BinaryReader::new(&wasm[range.clone()], range.start);
            let count = reader.read_var_u32().map_err(parse_error)?;
            (count, &wasm[reader.original_position()..range.end])
        }
        None => (0, &[][..]),
    };
    let mut body =
        Vec::with_capacity(entries.len() + 5 + extra.iter().map(Vec::len).sum::<usize>());
    (count + extra.len() as u32).encode(&mut body);
    body.extend_from_slice(entries);
    extra.iter().for_each(|entry| body.extend_from_slice(entry));
    Ok(body)
}

/// `memory` with `minimum` pages, for wasm-encoder.
fn encoder_memory(memory: &wasmparser::MemoryType, minimum: u64) -> MemoryType {
    MemoryType {
        minimum,
        maximum: memory.maximum,
        memory64: false,
        shared: false,
        page_size_log2: None,
    }
}

impl ImageLayout {
    /// How many host functions an image re-exports.
    pub(crate) fn functions(&self) -> usize {
        self.imports.len()
    }

    /// The name under which an image re-exports the runtime's `index`-th host function.
    pub(crate) fn function_export(index: usize) -> String {
        format!("{IMPORT_EXPORT_PREFIX}{index}")
    }

    /// An image module without data: the host function imports, the memory with `minimum` pages,
    /// and the exports.
    fn module(&self, minimum: u64) -> wasm_encoder::Module {
        let mut module = wasm_encoder::Module::new();
        let mut types = wasm_encoder::TypeSection::new();
        let mut imports = wasm_encoder::ImportSection::new();
        let mut exports = wasm_encoder::ExportSection::new();
        for (index, import) in self.imports.iter().enumerate() {
            types.ty().function(
                import.params.iter().copied(),
                import.results.iter().copied(),
            );
            imports.import(
                &import.module,
                &import.name,
                EntityType::Function(index as u32),
            );
            exports.export(
                &Self::function_export(index),
                wasm_encoder::ExportKind::Func,
                index as u32,
            );
        }
        exports.export(IMAGE_MEMORY, wasm_encoder::ExportKind::Memory, 0);
        let mut memories = wasm_encoder::MemorySection::new();
        memories.memory(encoder_memory(&self.memory, minimum));
        if !types.is_empty() {
            module.section(&types).section(&imports);
        }
        module.section(&memories).section(&exports);
        module
    }

    /// The handler image for `memory`, the bytes of the runtime's memory after a handler's
    /// top-level code ran (a whole number of pages): its minimum is the memory's current size, its
    /// maximum the runtime's, and its contents are active data segments over the non-zero parts of
    /// `memory`.
    pub(crate) fn handler_image(&self, memory: &[u8]) -> Vec<u8> {
        let pages = memory.len().div_ceil(WASM_PAGE) as u64;
        let mut gap = SEGMENT_GAP;
        let mut segments = non_zero_runs(memory, gap);
        while segments.len() > MAX_SEGMENTS {
            gap *= 4;
            segments = non_zero_runs(memory, gap);
        }
        let mut module = self.module(pages);
        let mut data = wasm_encoder::DataSection::new();
        for run in segments {
            // Offsets below 4 GiB: i32.const takes them as the same bits, signed.
            let offset = wasm_encoder::ConstExpr::i32_const(run.start as u32 as i32);
            data.active(0, &offset, memory[run].iter().copied());
        }
        module.section(&data);
        module.finish()
    }
}

/// The runs of `memory` holding non-zero bytes, joined across zero gaps shorter than `gap`.
fn non_zero_runs(memory: &[u8], gap: usize) -> Vec<Range<usize>> {
    let mut runs: Vec<Range<usize>> = Vec::new();
    let mut at = 0;
    while let Some(start) = memory[at..].iter().position(|&b| b != 0).map(|i| at + i) {
        let end = memory[start..]
            .iter()
            .position(|&b| b == 0)
            .map_or(memory.len(), |i| start + i);
        match runs.last_mut() {
            Some(last) if start - last.end < gap => last.end = end,
            _ => runs.push(start..end),
        }
        at = end;
    }
    runs
}

#[cfg(test)]
mod tests {
    //! The transforms on small hand-encoded modules, and the real runtime's split compiled and
    //! instantiated.

    use super::*;
    use wasm_encoder::{
        CodeSection, ConstExpr, DataCountSection, DataSection, ExportKind, ExportSection, Function,
        FunctionSection, GlobalSection, GlobalType, ImportSection, Instruction, MemorySection,
        Module, TypeSection, ValType as EncodedValType,
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
}
