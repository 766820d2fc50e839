//! FLUTE File Delivery Table (RFC 6726 §3.4): the FDT instance XML that describes the
//! objects of a session, and the ALC packets (TOI 0) that carry it.
//!
//! isnode sends each FDT instance as one object with Compact No-Code FEC (RFC 5445,
//! codepoint 0) and in-band EXT_FTI, the scheme every FLUTE receiver supports and the one
//! the `flute` crate uses for its own FDT; the objects themselves use FEC Encoding ID 5,
//! announced by the `FEC-OTI-*` attributes of their `File` element.

use std::borrow::Cow;

use quick_xml::events::attributes::Attribute;
use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, Event};
use quick_xml::name::QName;
use quick_xml::{Reader, Writer};

use crate::partition::Partition;
use crate::{Fti, WireError, FEC_ENCODING_ID_NO_CODE, FEC_ENCODING_ID_RS28, MAX_SYMBOL_LEN};

/// Length of the headers of an FDT packet: LCT header with EXT_FDT, EXT_FTI (Compact
/// No-Code) and EXT_CRC (44 bytes) plus the FEC Payload ID (4 bytes).
pub const FDT_HEADER_LEN: usize = 48;

/// Largest FDT Instance ID (20 bits, RFC 6726 §3.4.1).
pub const MAX_FDT_INSTANCE_ID: u32 = 0xF_FFFF;

/// XML namespace of FDT instances (RFC 6726 §3.4.2).
pub const FDT_NAMESPACE: &str = "urn:IETF:metadata:2005:FLUTE:FDT";

/// FEC Object Transmission Information of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FecOti {
    /// FEC Encoding ID (5 for isnode objects, 0 for Compact No-Code).
    pub encoding_id: u8,
    /// Maximum source block length B, in symbols.
    pub max_source_block_len: u32,
    /// Encoding symbol length E, in bytes.
    pub symbol_len: u32,
    /// Maximum number of encoding symbols per block, max_n (B for Compact No-Code).
    pub max_encoding_symbols: u32,
}

impl FecOti {
    /// FEC OTI of FEC Encoding ID 5 (RFC 5510 §5.2), checked: 1 <= E <= 65535,
    /// 1 <= B <= max_n <= 255.
    pub fn rs28(symbol_len: u32, max_source_block_len: u32, max_n: u32) -> Result<Self, WireError> {
        let oti = FecOti {
            encoding_id: FEC_ENCODING_ID_RS28,
            max_source_block_len,
            symbol_len,
            max_encoding_symbols: max_n,
        };
        oti.validate()?;
        Ok(oti)
    }

    /// Checks the ranges of the fields for the FEC schemes isnode knows (IDs 0 and 5).
    pub fn validate(&self) -> Result<(), WireError> {
        if self.symbol_len == 0 || self.symbol_len as usize > MAX_SYMBOL_LEN {
            return Err(WireError::InvalidParameter(
                "encoding symbol length must be in 1..=65535",
            ));
        }
        if self.max_source_block_len == 0 {
            return Err(WireError::InvalidParameter(
                "maximum source block length must be > 0",
            ));
        }
        if self.max_encoding_symbols < self.max_source_block_len {
            return Err(WireError::InvalidParameter(
                "max number of encoding symbols is below the maximum source block length",
            ));
        }
        match self.encoding_id {
            FEC_ENCODING_ID_RS28 if self.max_encoding_symbols > 255 => Err(
                WireError::InvalidParameter("FEC Encoding ID 5 limits max_n to 255"),
            ),
            FEC_ENCODING_ID_RS28 | FEC_ENCODING_ID_NO_CODE => Ok(()),
            _ => Err(WireError::InvalidParameter("unsupported FEC Encoding ID")),
        }
    }

    /// Number of repair symbols sent per block: m = max_n - B.
    pub fn repair_symbols(&self) -> u32 {
        self.max_encoding_symbols
            .saturating_sub(self.max_source_block_len)
    }

    /// Number of encoding symbols sent for a block of `source_symbols` source symbols:
    /// ESIs `0..encoding_symbols(k)`, i.e. k + max_n - B (a short block keeps all m repairs).
    pub fn encoding_symbols(&self, source_symbols: u32) -> u32 {
        source_symbols + self.repair_symbols()
    }

    /// The RFC 5052 partitioning of an object of `transfer_length` bytes under this OTI.
    /// For FEC Encoding ID 5 it also checks that the SBNs fit in 24 bits.
    pub fn partition(&self, transfer_length: u64) -> Result<Partition, WireError> {
        self.validate()?;
        let p = Partition::new(transfer_length, self.symbol_len, self.max_source_block_len)?;
        if self.encoding_id == FEC_ENCODING_ID_RS28 && p.blocks() > crate::MAX_SBN + 1 {
            return Err(WireError::SbnOutOfRange(p.blocks() - 1));
        }
        Ok(p)
    }
}

/// One `File` element of an FDT instance.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FdtFile {
    /// TOI of the object (1 and up).
    pub toi: u32,
    /// Content-Location: the URI of the object (isnode uses the object name).
    pub content_location: String,
    /// Content-Length: object size in bytes before content encoding.
    pub content_length: u64,
    /// Transfer-Length: bytes actually transported (equal to Content-Length for isnode).
    pub transfer_length: u64,
    /// Content-Type (MIME type), if known.
    pub content_type: Option<String>,
    /// Content-Encoding (e.g. `gzip`); `None` means the transport carries the content as is.
    pub content_encoding: Option<String>,
    /// FEC OTI of the object (`FEC-OTI-*` attributes), inherited from the FDT-Instance
    /// element when the File element lacks them.
    pub fec_oti: Option<FecOti>,
}

/// An FDT instance (RFC 6726 §3.4.2).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FdtInstance {
    /// FDT Instance ID (20 bits). It travels in EXT_FDT, not in the XML: [`FdtInstance::from_xml`]
    /// sets it to 0 and the caller takes it from the packets' `fdt_instance_id`.
    pub instance_id: u32,
    /// `Expires`: the 32 most significant bits of the NTP time (seconds since 1900-01-01)
    /// after which the instance is stale.
    pub expires: u64,
    /// The objects described.
    pub files: Vec<FdtFile>,
}

/// Whether `c` may appear in an XML 1.0 document.
fn is_xml_char(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Escapes an attribute value. Besides `& < > " '`, the whitespace characters tab, newline
/// and carriage return are written as character references so that attribute-value
/// normalisation does not turn them into spaces. Characters XML 1.0 cannot carry at all
/// become U+FFFD ([`FdtInstance::validate`] rejects them beforehand).
fn escape_attr(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' => out.push_str("&#9;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            c if is_xml_char(c) => out.push(c),
            _ => out.push('\u{FFFD}'),
        }
    }
    out
}

fn push_attr(elem: &mut BytesStart<'_>, key: &'static str, value: &str) {
    elem.push_attribute(Attribute {
        key: QName(key),
        value: Cow::Owned(escape_attr(value)),
    });
}

fn xml_err(e: impl std::fmt::Display) -> WireError {
    WireError::FdtXml(e.to_string())
}

/// FEC OTI attributes of an element, before inheritance.
#[derive(Default, Clone, Copy)]
struct OtiAttrs {
    encoding_id: Option<u8>,
    max_source_block_len: Option<u32>,
    symbol_len: Option<u32>,
    max_encoding_symbols: Option<u32>,
}

impl OtiAttrs {
    fn or(self, parent: OtiAttrs) -> OtiAttrs {
        OtiAttrs {
            encoding_id: self.encoding_id.or(parent.encoding_id),
            max_source_block_len: self.max_source_block_len.or(parent.max_source_block_len),
            symbol_len: self.symbol_len.or(parent.symbol_len),
            max_encoding_symbols: self.max_encoding_symbols.or(parent.max_encoding_symbols),
        }
    }

    /// Sets a `FEC-OTI-*` attribute; returns false if `key` is not one.
    fn set(&mut self, key: &str, value: &str) -> Result<bool, WireError> {
        match key {
            "FEC-OTI-FEC-Encoding-ID" => self.encoding_id = Some(parse_num(key, value)?),
            "FEC-OTI-Maximum-Source-Block-Length" => {
                self.max_source_block_len = Some(parse_num(key, value)?)
            }
            "FEC-OTI-Encoding-Symbol-Length" => self.symbol_len = Some(parse_num(key, value)?),
            "FEC-OTI-Max-Number-of-Encoding-Symbols" => {
                self.max_encoding_symbols = Some(parse_num(key, value)?)
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn resolve(self) -> Result<Option<FecOti>, WireError> {
        let Some(encoding_id) = self.encoding_id else {
            return Ok(None);
        };
        let (Some(b), Some(e)) = (self.max_source_block_len, self.symbol_len) else {
            return Err(WireError::FdtXml(format!(
                "FEC Encoding ID {encoding_id} without Maximum-Source-Block-Length and Encoding-Symbol-Length"
            )));
        };
        Ok(Some(FecOti {
            encoding_id,
            max_source_block_len: b,
            symbol_len: e,
            max_encoding_symbols: self.max_encoding_symbols.unwrap_or(b),
        }))
    }
}

fn parse_num<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, WireError> {
    value
        .trim()
        .parse()
        .map_err(|_| WireError::FdtXml(format!("attribute {key} has a bad value {value:?}")))
}

/// Attributes of a `File` element before inheritance.
#[derive(Default)]
struct FileAttrs {
    toi: Option<u32>,
    content_location: Option<String>,
    content_length: Option<u64>,
    transfer_length: Option<u64>,
    content_type: Option<String>,
    content_encoding: Option<String>,
    oti: OtiAttrs,
}

/// Attributes of the `FDT-Instance` element that `File` elements inherit.
#[derive(Default, Clone)]
struct InstanceAttrs {
    expires: Option<u64>,
    content_type: Option<String>,
    content_encoding: Option<String>,
    oti: OtiAttrs,
}

fn attr_value(attr: &Attribute<'_>) -> Result<String, WireError> {
    attr.normalized_value(quick_xml::XmlVersion::Implicit1_0)
        .map(Cow::into_owned)
        .map_err(xml_err)
}

fn read_instance_attrs(e: &BytesStart<'_>) -> Result<InstanceAttrs, WireError> {
    let mut a = InstanceAttrs::default();
    for attr in e.attributes() {
        let attr = attr.map_err(xml_err)?;
        let key = attr.key.as_ref();
        let value = attr_value(&attr)?;
        match key {
            "Expires" => a.expires = Some(parse_num(key, &value)?),
            "Content-Type" => a.content_type = Some(value),
            "Content-Encoding" => a.content_encoding = Some(value),
            _ => {
                a.oti.set(key, &value)?;
            }
        }
    }
    Ok(a)
}

fn read_file(e: &BytesStart<'_>, parent: &InstanceAttrs) -> Result<FdtFile, WireError> {
    let mut f = FileAttrs::default();
    for attr in e.attributes() {
        let attr = attr.map_err(xml_err)?;
        let key = attr.key.as_ref();
        let value = attr_value(&attr)?;
        match key {
            "TOI" => {
                f.toi = Some(value.trim().parse().map_err(|_| {
                    WireError::FdtXml(format!("TOI {value:?} is not a 32-bit unsigned integer"))
                })?)
            }
            "Content-Location" => f.content_location = Some(value),
            "Content-Length" => f.content_length = Some(parse_num(key, &value)?),
            "Transfer-Length" => f.transfer_length = Some(parse_num(key, &value)?),
            "Content-Type" => f.content_type = Some(value),
            "Content-Encoding" => f.content_encoding = Some(value),
            _ => {
                f.oti.set(key, &value)?;
            }
        }
    }
    let toi = f
        .toi
        .ok_or_else(|| WireError::FdtXml("File without TOI".into()))?;
    let content_location = f
        .content_location
        .ok_or_else(|| WireError::FdtXml(format!("File TOI={toi} without Content-Location")))?;
    let (content_length, transfer_length) = match (f.content_length, f.transfer_length) {
        (Some(c), Some(t)) => (c, t),
        (Some(c), None) => (c, c),
        (None, Some(t)) => (t, t),
        (None, None) => {
            return Err(WireError::FdtXml(format!(
                "File TOI={toi} has neither Content-Length nor Transfer-Length"
            )))
        }
    };
    Ok(FdtFile {
        toi,
        content_location,
        content_length,
        transfer_length,
        content_type: f.content_type.or_else(|| parent.content_type.clone()),
        content_encoding: f
            .content_encoding
            .or_else(|| parent.content_encoding.clone()),
        fec_oti: f.oti.or(parent.oti).resolve()?,
    })
}

impl FdtInstance {
    /// Checks that the instance can be sent: instance ID within 20 bits, every string
    /// representable in XML 1.0, every FEC OTI valid.
    pub fn validate(&self) -> Result<(), WireError> {
        if self.instance_id > MAX_FDT_INSTANCE_ID {
            return Err(WireError::InvalidParameter(
                "FDT instance ID does not fit in 20 bits",
            ));
        }
        for f in &self.files {
            let strings = [
                Some(f.content_location.as_str()),
                f.content_type.as_deref(),
                f.content_encoding.as_deref(),
            ];
            for s in strings.into_iter().flatten() {
                if let Some(c) = s.chars().find(|&c| !is_xml_char(c)) {
                    return Err(WireError::FdtXml(format!(
                        "File TOI={}: character U+{:04X} cannot be carried in XML",
                        f.toi, c as u32
                    )));
                }
            }
            if let Some(oti) = &f.fec_oti {
                oti.validate()?;
            }
        }
        Ok(())
    }

    /// Serialises the instance as RFC 6726 FDT XML (UTF-8, with XML declaration).
    pub fn to_xml(&self) -> String {
        let mut w = Writer::new(Vec::new());
        // Writing into a Vec cannot fail.
        let _ = w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)));
        let mut root = BytesStart::new("FDT-Instance");
        push_attr(&mut root, "xmlns", FDT_NAMESPACE);
        push_attr(&mut root, "Expires", &self.expires.to_string());
        let _ = w.write_event(Event::Start(root));
        for f in &self.files {
            let mut e = BytesStart::new("File");
            push_attr(&mut e, "TOI", &f.toi.to_string());
            push_attr(&mut e, "Content-Location", &f.content_location);
            push_attr(&mut e, "Content-Length", &f.content_length.to_string());
            push_attr(&mut e, "Transfer-Length", &f.transfer_length.to_string());
            if let Some(t) = &f.content_type {
                push_attr(&mut e, "Content-Type", t);
            }
            if let Some(t) = &f.content_encoding {
                push_attr(&mut e, "Content-Encoding", t);
            }
            if let Some(o) = &f.fec_oti {
                push_attr(
                    &mut e,
                    "FEC-OTI-FEC-Encoding-ID",
                    &o.encoding_id.to_string(),
                );
                push_attr(
                    &mut e,
                    "FEC-OTI-Maximum-Source-Block-Length",
                    &o.max_source_block_len.to_string(),
                );
                push_attr(
                    &mut e,
                    "FEC-OTI-Encoding-Symbol-Length",
                    &o.symbol_len.to_string(),
                );
                push_attr(
                    &mut e,
                    "FEC-OTI-Max-Number-of-Encoding-Symbols",
                    &o.max_encoding_symbols.to_string(),
                );
            }
            let _ = w.write_event(Event::Text(quick_xml::events::BytesText::new("\n")));
            let _ = w.write_event(Event::Empty(e));
        }
        let _ = w.write_event(Event::Text(quick_xml::events::BytesText::new("\n")));
        let _ = w.write_event(Event::End(BytesEnd::new("FDT-Instance")));
        // Everything written is UTF-8.
        String::from_utf8_lossy(&w.into_inner()).into_owned()
    }

    /// Parses an FDT instance (RFC 6726 §3.4.2), for instance one written by another FLUTE
    /// sender. Unknown attributes and elements are ignored; `FEC-OTI-*`, `Content-Type`
    /// and `Content-Encoding` of the `FDT-Instance` element are inherited by `File`
    /// elements that lack them. `instance_id` is 0 (it is carried by EXT_FDT).
    pub fn from_xml(xml: &[u8]) -> Result<Self, WireError> {
        let text = std::str::from_utf8(xml).map_err(xml_err)?;
        let mut reader = Reader::from_str(text);
        let config = reader.config_mut();
        config.check_end_names = true;
        config.allow_unmatched_ends = false;

        let mut instance: Option<InstanceAttrs> = None;
        let mut files = Vec::new();
        let mut depth = 0usize;
        let mut done = false;
        loop {
            let event = reader.read_event().map_err(xml_err)?;
            match event {
                Event::Start(ref e) | Event::Empty(ref e) => {
                    let is_empty = matches!(event, Event::Empty(_));
                    if done {
                        return Err(WireError::FdtXml(
                            "content after the FDT-Instance element".into(),
                        ));
                    }
                    let name = e.local_name();
                    match (depth, &instance) {
                        (0, _) => {
                            if name.as_ref() != "FDT-Instance" {
                                return Err(WireError::FdtXml(format!(
                                    "root element is {}, expected FDT-Instance",
                                    e.name().as_ref()
                                )));
                            }
                            instance = Some(read_instance_attrs(e)?);
                        }
                        (1, Some(parent)) if name.as_ref() == "File" => {
                            files.push(read_file(e, parent)?);
                        }
                        _ => {}
                    }
                    if is_empty {
                        if depth == 0 {
                            done = true;
                        }
                    } else {
                        depth += 1;
                    }
                }
                Event::End(_) => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        done = true;
                    }
                }
                Event::Eof => break,
                _ => {}
            }
        }
        if depth != 0 {
            return Err(WireError::FdtXml("unexpected end of document".into()));
        }
        let instance =
            instance.ok_or_else(|| WireError::FdtXml("no FDT-Instance element".into()))?;
        let expires = instance
            .expires
            .ok_or_else(|| WireError::FdtXml("FDT-Instance without Expires".into()))?;
        Ok(FdtInstance {
            instance_id: 0,
            expires,
            files,
        })
    }
}

/// Builds the ALC packets that carry `fdt` as TOI 0 of session `tsi`.
///
/// Each packet is: LCT header (32-bit TSI and TOI = 0, codepoint 0) with EXT_FDT (FLUTE
/// version 2, `fdt.instance_id`), EXT_FTI of Compact No-Code (transfer length, E =
/// `max_payload_len`, B = number of symbols, so the XML is one source block) and EXT_CRC,
/// then the FEC Payload ID (SBN 16 = 0 | ESI 16) and up to `max_payload_len` bytes of XML.
/// Every packet but the last carries exactly `max_payload_len` bytes; the last one is not padded.
/// Each packet is [`FDT_HEADER_LEN`] + payload bytes long.
pub fn build_fdt_packets(
    fdt: &FdtInstance,
    tsi: u32,
    max_payload_len: usize,
) -> Result<Vec<Vec<u8>>, WireError> {
    fdt.validate()?;
    if max_payload_len == 0 || max_payload_len > MAX_SYMBOL_LEN {
        return Err(WireError::BadSymbolLength(max_payload_len));
    }
    let xml = fdt.to_xml().into_bytes();
    let nb_symbols = xml.len().div_ceil(max_payload_len);
    let nb_symbols = u16::try_from(nb_symbols)
        .map_err(|_| WireError::InvalidParameter("FDT XML needs more than 65535 symbols"))?;
    let fti = Fti {
        transfer_length: xml.len() as u64,
        oti: FecOti {
            encoding_id: FEC_ENCODING_ID_NO_CODE,
            max_source_block_len: u32::from(nb_symbols),
            symbol_len: max_payload_len as u32,
            max_encoding_symbols: u32::from(nb_symbols),
        },
    };
    Ok(xml
        .chunks(max_payload_len)
        .enumerate()
        .map(|(esi, chunk)| {
            // esi < nb_symbols <= 65535
            crate::build_fdt_packet(tsi, fdt.instance_id, &fti, 0, esi as u16, chunk)
        })
        .collect())
}

/// Largest FDT instance, in XML bytes, that [`FdtAssembler`] and [`reassemble_fdt`] accept:
/// 1 MiB. An isnode FDT describes one object in a few hundred bytes; a Transfer-Length above
/// this in EXT_FTI is refused before anything is allocated for it.
pub const MAX_FDT_LEN_BYTES: u64 = 1 << 20;

/// Where the symbols of the instance being assembled go, fixed by the first accepted EXT_FTI.
#[derive(Clone, Debug)]
struct FdtLayout {
    fti: Fti,
    part: Partition,
    /// The XML being filled, `fti.transfer_length` bytes.
    xml: Vec<u8>,
    /// Which source symbols are in, by symbol index.
    present: Vec<bool>,
    /// Source symbols still missing.
    missing: u64,
}

/// Incremental reassembly of one FDT instance from its packets, in any order, duplicates
/// allowed: each packet is looked at once, when it is pushed, and its symbol copied into
/// place; the XML is handed out when the last missing symbol arrives.
///
/// Accepted are packets of TOI 0 with EXT_FDT of this instance, an EXT_FTI, a CRC that is not
/// invalid, and codepoint 0 (Compact No-Code, as isnode sends the FDT) or 5 (as the `flute`
/// crate may). Only source symbols are used (no FEC decoding). The first such packet whose
/// EXT_FTI announces at most [`MAX_FDT_LEN_BYTES`] (and at most 65535 symbols) fixes the layout:
/// that many bytes are allocated, never more; packets with another EXT_FTI are ignored.
#[derive(Clone, Debug)]
pub struct FdtAssembler {
    instance_id: u32,
    layout: Option<FdtLayout>,
    done: bool,
}

impl FdtAssembler {
    /// An assembler of instance `instance_id`.
    pub fn new(instance_id: u32) -> FdtAssembler {
        FdtAssembler {
            instance_id,
            layout: None,
            done: false,
        }
    }

    /// The FDT Instance ID being assembled.
    pub fn instance_id(&self) -> u32 {
        self.instance_id
    }

    /// True once the XML has been handed out by [`FdtAssembler::push`].
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Takes one packet; returns the instance's XML when this packet completed it (once).
    /// Packets that do not belong, or come after completion, are ignored.
    pub fn push(&mut self, p: &crate::AlcPacket<'_>) -> Option<Vec<u8>> {
        if self.done || !self.belongs(p) {
            return None;
        }
        let fti = p.fti?;
        if self.layout.is_none() {
            self.layout = FdtAssembler::layout_for(fti);
        }
        let layout = self.layout.as_mut()?;
        if fti != layout.fti || !layout.place(p.sbn, p.esi, p.payload) || layout.missing > 0 {
            return None;
        }
        self.done = true;
        self.layout.take().map(|l| l.xml)
    }

    /// Whether `p` is a packet of this instance's FDT that may carry a source symbol.
    fn belongs(&self, p: &crate::AlcPacket<'_>) -> bool {
        p.lct.toi == 0
            && !p.dataless
            && p.fdt_instance_id == Some(self.instance_id)
            && p.crc != crate::CrcStatus::Invalid
            && matches!(
                p.lct.codepoint,
                FEC_ENCODING_ID_NO_CODE | FEC_ENCODING_ID_RS28
            )
    }

    /// The layout an EXT_FTI announces, if it is within the limits.
    fn layout_for(fti: Fti) -> Option<FdtLayout> {
        if fti.transfer_length > MAX_FDT_LEN_BYTES {
            return None;
        }
        let part = Partition::new(
            fti.transfer_length,
            fti.oti.symbol_len,
            fti.oti.max_source_block_len,
        )
        .ok()?;
        let symbols = part.total_symbols();
        if symbols > u64::from(u16::MAX) {
            return None;
        }
        // Both bounded above: transfer_length by MAX_FDT_LEN_BYTES, symbols by 65535.
        let len = usize::try_from(fti.transfer_length).ok()?;
        Some(FdtLayout {
            fti,
            part,
            xml: vec![0; len],
            present: vec![false; symbols as usize],
            missing: symbols,
        })
    }
}

impl FdtLayout {
    /// Copies source symbol (`sbn`, `esi`) into place; false if it is not one of the layout's
    /// source symbols or has the wrong length. A duplicate is accepted and changes nothing.
    fn place(&mut self, sbn: u32, esi: u32, payload: &[u8]) -> bool {
        if esi >= self.part.source_symbols(sbn) {
            return false;
        }
        let index = self.part.first_symbol(sbn) + u64::from(esi);
        let e = u64::from(self.fti.oti.symbol_len);
        let need = if index + 1 == self.part.total_symbols() {
            u64::from(self.part.last_symbol_len())
        } else {
            e
        };
        let len = payload.len() as u64;
        if len < need || len > e {
            return false;
        }
        let Ok(i) = usize::try_from(index) else {
            return false;
        };
        let (start, need) = ((index * e) as usize, need as usize);
        let (Some(seen), Some(dst), Some(src)) = (
            self.present.get_mut(i),
            self.xml.get_mut(start..start + need),
            payload.get(..need),
        ) else {
            return false;
        };
        if !*seen {
            dst.copy_from_slice(src);
            *seen = true;
            self.missing -= 1;
        }
        true
    }
}

/// Reassembles the XML of one FDT instance from its packets with an [`FdtAssembler`] (any
/// order, duplicates allowed, at most [`MAX_FDT_LEN_BYTES`]). Returns `None` until every
/// source symbol announced by the EXT_FTI is present.
/// Packets of other instances, without FTI, or with a CRC mismatch are ignored.
pub fn reassemble_fdt(packets: &[crate::AlcPacket<'_>], instance_id: u32) -> Option<Vec<u8>> {
    let mut assembler = FdtAssembler::new(instance_id);
    packets.iter().find_map(|p| assembler.push(p))
}
