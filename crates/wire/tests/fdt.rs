//! FDT instance XML and FDT packets.

use isnode_wire::fdt::{
    build_fdt_packets, reassemble_fdt, FdtFile, FdtInstance, FecOti, FDT_HEADER_LEN,
};
use isnode_wire::{parse_packet, CrcStatus, WireError, FLUTE_VERSION};
use proptest::prelude::*;

fn file(toi: u32, name: &str) -> FdtFile {
    FdtFile {
        toi,
        content_location: name.to_string(),
        content_length: 1_000_000,
        transfer_length: 1_000_000,
        content_type: Some("video/mp2t".into()),
        content_encoding: None,
        fec_oti: Some(FecOti::rs28(1408, 223, 255).unwrap()),
    }
}

#[test]
fn xml_example_is_stable() {
    let fdt = FdtInstance {
        instance_id: 3,
        expires: 3_900_000_000,
        files: vec![file(1, "movies/a&b.ts")],
    };
    let xml = fdt.to_xml();
    assert_eq!(
        xml,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
<FDT-Instance xmlns=\"urn:IETF:metadata:2005:FLUTE:FDT\" Expires=\"3900000000\">\n\
<File TOI=\"1\" Content-Location=\"movies/a&amp;b.ts\" Content-Length=\"1000000\" \
Transfer-Length=\"1000000\" Content-Type=\"video/mp2t\" FEC-OTI-FEC-Encoding-ID=\"5\" \
FEC-OTI-Maximum-Source-Block-Length=\"223\" FEC-OTI-Encoding-Symbol-Length=\"1408\" \
FEC-OTI-Max-Number-of-Encoding-Symbols=\"255\"/>\n</FDT-Instance>"
    );
    let back = FdtInstance::from_xml(xml.as_bytes()).unwrap();
    assert_eq!(
        back,
        FdtInstance {
            instance_id: 0,
            ..fdt
        }
    );
}

#[test]
fn names_needing_escapes_round_trip() {
    let names = [
        "a&b<c>d\"e'f",
        "tab\there\nnewline\r\ncrlf",
        "  leading and trailing  ",
        "unicode/été/日本語/🎬.ts",
        "&amp; literally",
        "]]> and <!-- not a comment -->",
        "",
    ];
    let fdt = FdtInstance {
        instance_id: 0,
        expires: 1,
        files: names
            .iter()
            .enumerate()
            .map(|(i, n)| file(i as u32 + 1, n))
            .collect(),
    };
    let back = FdtInstance::from_xml(fdt.to_xml().as_bytes()).unwrap();
    assert_eq!(back, fdt);
}

#[test]
fn control_characters_cannot_be_sent() {
    let fdt = FdtInstance {
        instance_id: 0,
        expires: 1,
        files: vec![file(1, "bad\u{1}name")],
    };
    assert!(matches!(fdt.validate(), Err(WireError::FdtXml(_))));
    assert!(matches!(
        build_fdt_packets(&fdt, 1, 1400),
        Err(WireError::FdtXml(_))
    ));
    // to_xml stays total and well-formed.
    let back = FdtInstance::from_xml(fdt.to_xml().as_bytes()).unwrap();
    assert_eq!(back.files[0].content_location, "bad\u{FFFD}name");
}

#[test]
fn parses_fdt_written_by_flute() {
    // Captured from flute::sender::Sender 1.11.7 (see tests/flute_interop.rs).
    let xml = include_bytes!("fixtures/flute_fdt.xml");
    let fdt = FdtInstance::from_xml(xml).unwrap();
    assert_eq!(fdt.expires, 4_004_359_188);
    assert_eq!(fdt.files.len(), 1);
    let f = &fdt.files[0];
    assert_eq!(f.toi, 1);
    assert_eq!(f.content_location, "file:///movies/a.ts");
    assert_eq!(f.content_length, 314_761);
    assert_eq!(f.transfer_length, 314_761);
    assert_eq!(f.content_type.as_deref(), Some("video/mp2t"));
    assert_eq!(f.fec_oti, Some(FecOti::rs28(1408, 223, 255).unwrap()));
}

#[test]
fn file_inherits_instance_attributes() {
    // As in flute's objectreceiver tests: FEC OTI only on the FDT-Instance element.
    let xml = br#"<?xml version="1.0" encoding="UTF-8"?>
<FDT-Instance xmlns="urn:IETF:metadata:2005:FLUTE:FDT" Expires="3000000000" FEC-OTI-FEC-Encoding-ID="0" FEC-OTI-Maximum-Source-Block-Length="64" FEC-OTI-Encoding-Symbol-Length="1400" Content-Type="text/plain">
<File Content-Location="file:///object" TOI="1" Content-Length="10000"/>
<File Content-Location="file:///rs" TOI="2" Transfer-Length="5" Content-Type="video/mp4" FEC-OTI-FEC-Encoding-ID="5" FEC-OTI-Maximum-Source-Block-Length="10"><mbms2007:Cache-Control><mbms2007:no-cache>true</mbms2007:no-cache></mbms2007:Cache-Control></File>
</FDT-Instance>"#;
    let fdt = FdtInstance::from_xml(xml).unwrap();
    assert_eq!(fdt.expires, 3_000_000_000);
    let a = &fdt.files[0];
    assert_eq!((a.content_length, a.transfer_length), (10000, 10000));
    assert_eq!(a.content_type.as_deref(), Some("text/plain"));
    assert_eq!(
        a.fec_oti,
        Some(FecOti {
            encoding_id: 0,
            max_source_block_len: 64,
            symbol_len: 1400,
            max_encoding_symbols: 64
        })
    );
    let b = &fdt.files[1];
    assert_eq!((b.content_length, b.transfer_length), (5, 5));
    assert_eq!(b.content_type.as_deref(), Some("video/mp4"));
    assert_eq!(
        b.fec_oti,
        Some(FecOti {
            encoding_id: 5,
            max_source_block_len: 10,
            symbol_len: 1400,
            max_encoding_symbols: 10
        })
    );
}

#[test]
fn malformed_fdts_are_typed_errors() {
    let cases: &[&[u8]] = &[
        b"",
        b"\xff\xfe",
        b"<NotFDT Expires=\"1\"/>",
        b"<FDT-Instance/>",
        b"<FDT-Instance Expires=\"x\"/>",
        b"<FDT-Instance Expires=\"1\"><File TOI=\"1\" Content-Location=\"a\"/></FDT-Instance>",
        b"<FDT-Instance Expires=\"1\"><File Content-Location=\"a\" Content-Length=\"1\"/></FDT-Instance>",
        b"<FDT-Instance Expires=\"1\"><File TOI=\"99999999999\" Content-Location=\"a\" Content-Length=\"1\"/></FDT-Instance>",
        b"<FDT-Instance Expires=\"1\"><File TOI=\"1\" Content-Length=\"1\"/></FDT-Instance>",
        b"<FDT-Instance Expires=\"1\"><File TOI=\"1\" Content-Location=\"&bogus;\" Content-Length=\"1\"/></FDT-Instance>",
        b"<FDT-Instance Expires=\"1\"><File TOI=\"1\" Content-Location=\"a\" Content-Length=\"1\" FEC-OTI-FEC-Encoding-ID=\"5\"/></FDT-Instance>",
        b"<FDT-Instance Expires=\"1\"><File></FDT-Instance>",
        b"<FDT-Instance Expires=\"1\">",
        b"<FDT-Instance Expires=\"1\"/><FDT-Instance Expires=\"2\"/>",
    ];
    for xml in cases {
        match FdtInstance::from_xml(xml) {
            Err(WireError::FdtXml(_)) => {}
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(xml)),
        }
    }
}

#[test]
fn fdt_packets_layout_and_reassembly() {
    let fdt = FdtInstance {
        instance_id: 0xABCDE,
        expires: 3_900_000_000,
        files: (1..=20)
            .map(|t| file(t, &format!("movies/{t}.ts")))
            .collect(),
    };
    let xml = fdt.to_xml();
    let packets = build_fdt_packets(&fdt, 0x0102_0304, 500).unwrap();
    assert_eq!(packets.len(), xml.len().div_ceil(500));
    let mut parsed = Vec::new();
    for (i, p) in packets.iter().enumerate() {
        let last = i + 1 == packets.len();
        if !last {
            assert_eq!(p.len(), FDT_HEADER_LEN + 500);
        }
        // V=1, S=1, O=1, HDR_LEN=11, codepoint 0 (Compact No-Code), TSI, TOI=0
        assert_eq!(
            &p[..16],
            &[0x10, 0xA0, 11, 0, 0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0]
        );
        // EXT_FDT: HET=192, V=2, instance id
        assert_eq!(&p[16..20], &[192, 0x2A, 0xBC, 0xDE]);
        // EXT_FTI: HET=64 HEL=4, L (48 bits), reserved, E=500, B=number of symbols
        assert_eq!(&p[20..22], &[64, 4]);
        assert_eq!(&p[22..28], &(xml.len() as u64).to_be_bytes()[2..]);
        assert_eq!(&p[30..32], &500u16.to_be_bytes());
        assert_eq!(&p[32..36], &(packets.len() as u32).to_be_bytes());
        assert_eq!(&p[36..40], &[120, 2, 0, 0]);
        let a = parse_packet(p).unwrap();
        assert_eq!(a.crc, CrcStatus::Valid);
        assert_eq!(a.fdt_instance_id, Some(0xABCDE));
        assert_eq!(a.flute_version, Some(FLUTE_VERSION));
        assert_eq!((a.sbn, a.esi), (0, i as u32));
        let fti = a.fti.unwrap();
        assert_eq!(fti.transfer_length, xml.len() as u64);
        assert_eq!(fti.oti.encoding_id, 0);
        parsed.push(a);
    }
    // Any order, with a duplicate; missing one symbol gives None.
    parsed.reverse();
    parsed.push(parsed[0]);
    let got = reassemble_fdt(&parsed, 0xABCDE).unwrap();
    assert_eq!(got, xml.as_bytes());
    assert_eq!(reassemble_fdt(&parsed, 1), None);
    assert_eq!(reassemble_fdt(&parsed[1..parsed.len() - 1], 0xABCDE), None);
    let back = FdtInstance::from_xml(&got).unwrap();
    assert_eq!(back.files, fdt.files);
}

#[test]
fn fdt_packet_parameter_errors() {
    let mut fdt = FdtInstance {
        instance_id: 0x10_0000,
        expires: 1,
        files: vec![file(1, "a")],
    };
    assert!(matches!(
        build_fdt_packets(&fdt, 1, 1400),
        Err(WireError::InvalidParameter(_))
    ));
    fdt.instance_id = 1;
    assert_eq!(
        build_fdt_packets(&fdt, 1, 0),
        Err(WireError::BadSymbolLength(0))
    );
    fdt.files[0].fec_oti = Some(FecOti {
        encoding_id: 5,
        max_source_block_len: 223,
        symbol_len: 1408,
        max_encoding_symbols: 300,
    });
    assert!(matches!(
        build_fdt_packets(&fdt, 1, 1400),
        Err(WireError::InvalidParameter(_))
    ));
}

#[test]
fn fec_oti_helpers() {
    let oti = FecOti::rs28(1408, 223, 255).unwrap();
    assert_eq!(oti.repair_symbols(), 32);
    assert_eq!(oti.encoding_symbols(223), 255);
    assert_eq!(oti.encoding_symbols(10), 42);
    assert!(FecOti::rs28(1408, 223, 256).is_err());
    assert!(FecOti::rs28(1408, 0, 255).is_err());
    assert!(FecOti::rs28(1408, 200, 100).is_err());
    assert!(FecOti::rs28(0, 223, 255).is_err());
    assert!(FecOti::rs28(65536, 223, 255).is_err());
    // 2^24 blocks of one symbol is the most FEC Encoding ID 5 can number.
    let one = FecOti::rs28(1, 1, 2).unwrap();
    assert_eq!(one.partition(1 << 24).unwrap().blocks(), 1 << 24);
    assert!(matches!(
        one.partition((1 << 24) + 1),
        Err(WireError::SbnOutOfRange(_))
    ));
}

fn arb_string() -> impl Strategy<Value = String> {
    // Any XML-representable text, including markup and whitespace characters.
    proptest::collection::vec(
        prop_oneof![
            Just('&'),
            Just('<'),
            Just('>'),
            Just('"'),
            Just('\''),
            Just('\t'),
            Just('\n'),
            Just('\r'),
            Just(' '),
            proptest::char::range('a', 'z'),
            proptest::char::range('\u{A0}', '\u{D7FF}'),
            proptest::char::range('\u{10000}', '\u{10FFFF}'),
        ],
        0..40,
    )
    .prop_map(|v| v.into_iter().collect())
}

proptest! {
    #[test]
    fn xml_round_trip(
        expires in any::<u64>(),
        files in proptest::collection::vec(
            (any::<u32>(), arb_string(), any::<u64>(), any::<u64>(),
             proptest::option::of(arb_string()), proptest::option::of(arb_string()),
             proptest::option::of((1u32..=65535, 1u32..=255))),
            0..5),
    ) {
        let fdt = FdtInstance {
            instance_id: 0,
            expires,
            files: files.into_iter().map(|(toi, loc, cl, tl, ct, ce, oti)| FdtFile {
                toi,
                content_location: loc,
                content_length: cl,
                transfer_length: tl,
                content_type: ct,
                content_encoding: ce,
                fec_oti: oti.map(|(e, b)| FecOti::rs28(e, b, 255).unwrap()),
            }).collect(),
        };
        prop_assert!(fdt.validate().is_ok());
        let back = FdtInstance::from_xml(fdt.to_xml().as_bytes()).unwrap();
        prop_assert_eq!(back, fdt);
    }

    #[test]
    fn from_xml_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = FdtInstance::from_xml(&bytes);
    }

    #[test]
    fn from_xml_mutated_never_panics(pos in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<prop::sample::Index>()) {
        let fdt = FdtInstance { instance_id: 0, expires: 1, files: vec![file(1, "x&y"), file(2, "z")] };
        let mut xml = fdt.to_xml().into_bytes();
        let i = pos.index(xml.len());
        xml[i] = byte;
        let c = cut.index(xml.len() + 1);
        let _ = FdtInstance::from_xml(&xml[..c]);
    }
}
