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
//!
//! `mod.rs` reads the runtime and writes the code module; `image.rs` writes images.

mod image;
#[cfg(test)]
mod tests;

use std::ops::Range;

use wasm_encoder::{Encode, EntityType, RawSection};
use wasmparser::{
    DataKind, DataSectionReader, Encoding, ExportSectionReader, FunctionBody, GlobalSectionReader,
    ImportSectionReader, Operator, Parser, Payload, TypeRef, ValType,
};

pub(crate) use image::ImageLayout;
use image::{HostImport, encoder_memory};

/// Where the code module imports its memory from.
pub(crate) const IMAGE_MODULE: &str = "parley:image";
/// The name of that import, and of every image's memory export.
pub(crate) const IMAGE_MEMORY: &str = "memory";
/// Prefix of the exports that expose the runtime's mutable globals to the host.
pub(crate) const GLOBAL_EXPORT_PREFIX: &str = "parley:global:";

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
    let mut scan = Scan::default();
    for payload in Parser::new(0).parse_all(runtime) {
        if !scan.payload(payload.map_err(parse_error)?)? {
            break;
        }
    }
    let memory = match scan.memories.as_slice() {
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
    if !scan.has_imports {
        insert_in_order(&mut scan.pieces, Piece::Imports(None));
    }
    if !scan.has_exports {
        insert_in_order(&mut scan.pieces, Piece::Exports(None));
    }
    let globals: Vec<String> = scan
        .mutable_globals
        .iter()
        .map(|index| format!("{GLOBAL_EXPORT_PREFIX}{index}"))
        .collect();
    let code = scan.code_module(runtime, &memory, &globals)?;
    let layout = ImageLayout::new(memory, scan.host_imports);
    let mut base = layout.module(memory.initial);
    if let Some(range) = scan.data {
        base.section(&RawSection {
            id: 11,
            data: &runtime[range],
        });
    }
    Ok(Split {
        code,
        base_image: base.finish(),
        layout,
        globals,
    })
}

/// What reading the runtime found: the sections to copy and what the split needs to know.
#[derive(Default)]
struct Scan {
    pieces: Vec<Piece>,
    memories: Vec<wasmparser::MemoryType>,
    /// Indices of the mutable globals.
    mutable_globals: Vec<u32>,
    types: Vec<wasmparser::FuncType>,
    host_imports: Vec<HostImport>,
    /// The data section's contents, which go to the base image.
    data: Option<Range<usize>>,
    has_imports: bool,
    has_exports: bool,
}

impl Scan {
    /// Takes in one payload of the runtime; false at its end.
    fn payload(&mut self, payload: Payload<'_>) -> Result<bool, SplitError> {
        match payload {
            Payload::Version { encoding, .. } => {
                if encoding != Encoding::Module {
                    return refuse("it is a component, not a core module");
                }
            }
            Payload::ImportSection(reader) => self.imports(reader)?,
            Payload::MemorySection(reader) => {
                for memory in reader {
                    self.memories.push(memory.map_err(parse_error)?);
                }
            }
            Payload::GlobalSection(reader) => self.globals(reader)?,
            Payload::ExportSection(reader) => self.exports(reader)?,
            Payload::DataCountSection { .. } => {}
            Payload::DataSection(reader) => self.data(reader)?,
            Payload::CodeSectionEntry(body) => check_code(&body)?,
            Payload::TypeSection(reader) => {
                self.pieces.push(Piece::Raw(1, reader.range()));
                for ty in reader.into_iter_err_on_gc_types() {
                    self.types.push(ty.map_err(parse_error)?);
                }
            }
            Payload::FunctionSection(reader) => self.pieces.push(Piece::Raw(3, reader.range())),
            Payload::TableSection(reader) => self.pieces.push(Piece::Raw(4, reader.range())),
            Payload::TagSection(reader) => self.pieces.push(Piece::Raw(13, reader.range())),
            Payload::StartSection { range, .. } => self.pieces.push(Piece::Raw(8, range)),
            Payload::ElementSection(reader) => self.pieces.push(Piece::Raw(9, reader.range())),
            Payload::CodeSectionStart { range, .. } => self.pieces.push(Piece::Raw(10, range)),
            Payload::CustomSection(reader) => self.pieces.push(Piece::Raw(0, reader.range())),
            Payload::End(_) => return Ok(false),
            _ => return refuse("it has a section this transform does not know"),
        }
        Ok(true)
    }

    /// The imports: functions only, none from the reserved module; each becomes a host import.
    fn imports(&mut self, reader: ImportSectionReader<'_>) -> Result<(), SplitError> {
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
                    let Some(ty) = self.types.get(index as usize) else {
                        return refuse("an import has an unknown type");
                    };
                    let convert = |types: &[ValType]| -> Result<Vec<_>, SplitError> {
                        types.iter().map(|ty| encoder_type(*ty)).collect()
                    };
                    self.host_imports.push(HostImport {
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
        self.has_imports = true;
        self.pieces.push(Piece::Imports(Some(range)));
        Ok(())
    }

    /// The globals, copied; the mutable ones (unshared numbers only) are noted for export.
    fn globals(&mut self, reader: GlobalSectionReader<'_>) -> Result<(), SplitError> {
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
            self.mutable_globals.push(index);
        }
        self.pieces.push(Piece::Raw(6, range));
        Ok(())
    }

    /// The exports, none with the reserved prefix.
    fn exports(&mut self, reader: ExportSectionReader<'_>) -> Result<(), SplitError> {
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
        self.has_exports = true;
        self.pieces.push(Piece::Exports(Some(range)));
        Ok(())
    }

    /// The data segments, active at constant offsets of memory 0; they go to the base image.
    fn data(&mut self, reader: DataSectionReader<'_>) -> Result<(), SplitError> {
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
                    return refuse("a data segment is not at a constant offset of memory 0");
                }
            }
        }
        self.data = Some(range);
        Ok(())
    }

    /// The code module: every piece in order, the memory import and the global exports added.
    fn code_module(
        &self,
        runtime: &[u8],
        memory: &wasmparser::MemoryType,
        globals: &[String],
    ) -> Result<Vec<u8>, SplitError> {
        let mut code = wasm_encoder::Module::new();
        for piece in &self.pieces {
            match piece {
                Piece::Raw(id, range) => code.section(&RawSection {
                    id: *id,
                    data: &runtime[range.clone()],
                }),
                Piece::Imports(range) => {
                    let mut entry = Vec::new();
                    IMAGE_MODULE.encode(&mut entry);
                    IMAGE_MEMORY.encode(&mut entry);
                    EntityType::Memory(encoder_memory(memory, memory.initial)).encode(&mut entry);
                    let body = append(runtime, range.as_ref(), &[entry])?;
                    code.section(&RawSection { id: 2, data: &body })
                }
                Piece::Exports(range) => {
                    let entries: Vec<Vec<u8>> = globals
                        .iter()
                        .zip(&self.mutable_globals)
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
        Ok(code.finish())
    }
}

/// Refuses a function that references data segments: the code module has none (they move to
/// the base image).
fn check_code(body: &FunctionBody<'_>) -> Result<(), SplitError> {
    let mut ops = body.get_operators_reader().map_err(parse_error)?;
    while !ops.eof() {
        if let Operator::MemoryInit { .. } | Operator::DataDrop { .. } =
            ops.read().map_err(parse_error)?
        {
            return refuse("its code references data segments (memory.init or data.drop)");
        }
    }
    Ok(())
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
