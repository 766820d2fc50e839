//! A tiny ffmpeg-made ladder (320x180 and 640x360, H.264 + AAC, 25 frame/s, a key frame
//! every 2 s), in MPEG-TS and in CMAF (`+cmaf`, `+frag_keyframe+empty_moov+default_base_moof`,
//! `+dash+cmaf` with per-fragment `sidx`): the descriptors agree with ffprobe, the CMAF
//! fragment index with ffprobe's key frames (where each starts and ends), the two rungs are aligned and a rung with
//! 1.2 s GOPs is refused. Fails (never skips) when ffmpeg or ffprobe is missing.

use std::path::Path;
use std::process::Command;

use isnode_media::{
    check_aligned, probe, AlignmentError, Container, Indexer, MediaIndex, RenditionTiming, SidxUse,
    Tolerance,
};

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e} (install Debian's ffmpeg package)"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Encodes 6 s of test pattern + tone at `size` with `gop`-frame GOPs into `name`.
fn make(dir: &Path, name: &str, size: &str, gop: u32, fmt: &[&str]) -> Vec<u8> {
    let out = dir.join(name);
    let g = gop.to_string();
    run(Command::new("ffmpeg")
        .args(["-v", "error", "-y", "-f", "lavfi"])
        .arg("-i")
        .arg(format!("testsrc2=size={size}:rate=25"))
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
        .args(["-t", "6", "-c:v", "libx264", "-preset", "veryfast"])
        .args(["-g", &g, "-keyint_min", &g, "-sc_threshold", "0"])
        .args(["-c:a", "aac", "-b:a", "64k"])
        .args(fmt)
        .arg(&out));
    std::fs::read(&out).unwrap()
}

fn index(data: &[u8]) -> MediaIndex {
    let mut ix = Indexer::new();
    for c in data.chunks(50_000) {
        ix.feed(c);
    }
    ix.finish()
}

/// ffprobe's view of the video stream: profile name, level, width, height, frame rate,
/// and the byte positions of the key frames.
struct Probe {
    profile: String,
    level: u32,
    width: u32,
    height: u32,
    rate: String,
    keys: Vec<u64>,
    /// One past the last byte of each key frame (its `pos` + `size`).
    key_ends: Vec<u64>,
}

fn ffprobe(dir: &Path, name: &str) -> Probe {
    let path = dir.join(name);
    let s = run(Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-of",
            "default=nw=1",
        ])
        .args([
            "-show_entries",
            "stream=profile,level,width,height,r_frame_rate",
        ])
        .arg(&path));
    let field = |k: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("ffprobe gave no {k}: {s}"))
            .to_string()
    };
    let csv = run(Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v", "-of", "csv"])
        .args(["-show_entries", "packet=size,pos,flags"])
        .arg(&path));
    Probe {
        profile: field("profile"),
        level: field("level").parse().unwrap(),
        width: field("width").parse().unwrap(),
        height: field("height").parse().unwrap(),
        rate: field("r_frame_rate"),
        keys: csv
            .lines()
            .filter(|l| l.contains(",K"))
            .filter_map(|l| l.split(',').nth(2)?.parse().ok())
            .collect(),
        key_ends: csv
            .lines()
            .filter(|l| l.contains(",K"))
            .filter_map(|l| {
                let mut f = l.split(',').skip(1);
                let size: u64 = f.next()?.parse().ok()?;
                let pos: u64 = f.next()?.parse().ok()?;
                Some(pos + size)
            })
            .collect(),
    }
}

/// The descriptor matches ffprobe: `avc1.PPCCLL` with PP = ffprobe's profile, LL its level.
fn check_descriptor(ix: &MediaIndex, p: &Probe, name: &str) {
    let d = ix.rendition.as_ref().expect("a descriptor");
    let v = d.video.as_ref().expect("video");
    let profile_idc = match p.profile.as_str() {
        "High" => "64",
        "Main" => "4D",
        "Constrained Baseline" | "Baseline" => "42",
        other => panic!("unexpected profile {other}"),
    };
    assert_eq!(&v.codec[..7], &format!("avc1.{profile_idc}"), "{name}");
    assert_eq!(&v.codec[9..], format!("{:02X}", p.level), "{name}");
    assert_eq!(
        (v.width, v.height),
        (Some(p.width), Some(p.height)),
        "{name}"
    );
    let fr = v.frame_rate.expect("frame rate");
    assert_eq!(format!("{}/{}", fr.num, fr.den), p.rate, "{name}");
    assert_eq!(d.audio.len(), 1, "{name}");
    assert_eq!(d.audio[0].codec, "mp4a.40.2", "{name}");
    assert_eq!(d.audio[0].sample_rate, Some(48_000), "{name}");
    assert_eq!(d.codecs(), format!("{},mp4a.40.2", v.codec));
}

/// The CMAF fragment index: the init ends at the first fragment, every fragment is a key
/// frame 2 s apart holding ffprobe's key frame, the fragments tile the media.
fn check_fragments(ix: &MediaIndex, p: &Probe, data_len: u64, name: &str, sidx: SidxUse) {
    let f = ix.fragments.as_ref().expect("fragmented");
    assert!(f.complete, "{name}");
    assert_eq!(f.sidx, sidx, "{name}");
    assert_eq!(f.fragments.len(), 3, "{name}: {f:?}");
    assert!(f.init.length > 0 && f.init.length <= f.fragments[0].bytes.offset);
    assert_eq!(p.key_ends.len(), f.fragments.len(), "{name}");
    for (i, (frag, key)) in f.fragments.iter().zip(&p.keys).enumerate() {
        assert!(frag.starts_with_sync, "{name} fragment {i}");
        assert_eq!(
            frag.first_sample_end,
            p.key_ends.get(i).copied(),
            "{name} {i}: key frame end"
        );
        assert!(
            frag.bytes.offset < *key && *key < frag.bytes.end(),
            "{name} {i}"
        );
        let t = f.seconds(i128::from(frag.decode_start));
        assert!((t - 2.0 * i as f64).abs() < 0.03, "{name} {i}: {t}");
        assert_eq!(frag.samples, 50, "{name} {i}");
    }
    assert!(f.fragments.last().unwrap().bytes.end() <= data_len);
    let offsets: Vec<u64> = ix.points.iter().map(|p| p.offset_bytes).collect();
    let starts: Vec<u64> = f.fragments.iter().map(|g| g.bytes.offset).collect();
    assert_eq!(offsets, starts, "{name}: points are the fragment starts");
    assert!((f.duration_s().unwrap() - 6.0).abs() < 0.05, "{name}");
}

fn duration(data: &[u8], ix: &MediaIndex) -> f64 {
    let info = probe(data, data.len() as u64).unwrap();
    info.duration_s
        .or_else(|| ix.fragments.as_ref()?.duration_s())
        .expect("a duration")
}

fn as_timing(t: &[(Vec<f64>, f64)]) -> Vec<RenditionTiming<'_>> {
    t.iter()
        .map(|(k, d)| RenditionTiming {
            key_times_s: k,
            duration_s: *d,
        })
        .collect()
}

fn key_times(ix: &MediaIndex) -> Vec<f64> {
    ix.points.iter().map(|p| p.time_s).collect()
}

#[test]
fn ts_and_cmaf_ladder() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cmaf = ["-movflags", "+cmaf", "-f", "mp4"];
    let frag = [
        "-movflags",
        "+frag_keyframe+empty_moov+default_base_moof",
        "-f",
        "mp4",
    ];
    let dash = ["-movflags", "+dash+cmaf", "-f", "mp4"];
    let ts = ["-f", "mpegts"];
    for (ext, fmt, container) in [
        ("ts", &ts[..], Container::MpegTs),
        ("cmaf.mp4", &cmaf[..], Container::Mp4),
        ("frag.mp4", &frag[..], Container::Mp4),
        ("dash.mp4", &dash[..], Container::Mp4),
    ] {
        let mut timings = Vec::new();
        for (rung, (size, gop)) in [("320x180", 50), ("640x360", 50), ("640x360", 30)]
            .into_iter()
            .enumerate()
        {
            let name = format!("r{rung}.{ext}");
            let data = make(d, &name, size, gop, fmt);
            let ix = index(&data);
            assert_eq!(ix.container, container);
            let p = ffprobe(d, &name);
            check_descriptor(&ix, &p, &name);
            if container == Container::Mp4 && gop == 50 {
                let sidx = if ext == "dash.mp4" {
                    SidxUse::Used
                } else {
                    SidxUse::Absent
                };
                check_fragments(&ix, &p, data.len() as u64, &name, sidx);
            }
            timings.push((key_times(&ix), duration(&data, &ix)));
        }
        let tol = Tolerance::for_frame_rate(25.0);
        let all = as_timing(&timings);
        let aligned = check_aligned(&all[..2], tol).unwrap_or_else(|e| panic!("{ext}: {e}"));
        assert_eq!(aligned.len(), 3, "{ext}: {aligned:?}");
        match check_aligned(&all, tol) {
            Err(AlignmentError::Misaligned {
                rendition, time_s, ..
            }) => {
                assert_eq!(rendition, 2, "{ext}");
                assert!((time_s - 1.2).abs() < 0.05, "{ext}: {time_s}");
            }
            other => panic!("{ext}: the 1.2 s GOP rung was not refused: {other:?}"),
        }
    }
}
