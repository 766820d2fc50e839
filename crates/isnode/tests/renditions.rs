//! Titles with renditions end to end (issue 31, first slice): an ffmpeg-made 3-rung ladder
//! (H.264 + AAC, 2 s GOPs aligned) in MPEG-TS and in CMAF ingested as one title;
//! `master.m3u8` read by ffprobe and each variant copied by ffmpeg to a file that decodes
//! without error; each rung's I-frame playlist (TS and CMAF) checked against ffprobe's key
//! frames, and a TS rung's decoded by ffmpeg; `manifest.mpd` read by ffmpeg; a misaligned rung refused by name; `ls`
//! and `rm` of the title.
//!
//! These tests need Debian's `ffmpeg` package (`bash scripts/test` installs it); without
//! it they fail, saying so.

mod serve_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serve_support::media::{decodes_cleanly, tool};
use serve_support::*;

/// The ladder: size, video bitrate.
const LADDER: [(&str, &str); 3] = [
    ("320x180", "400k"),
    ("640x360", "1200k"),
    ("960x540", "2500k"),
];

/// How a rung is muxed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mux {
    Ts,
    /// `-movflags +cmaf`.
    Cmaf,
    /// `-movflags +frag_keyframe+empty_moov+default_base_moof`.
    FragKeyframe,
}

/// Runs ffmpeg or ffprobe; its stdout, failing on any complaint.
#[track_caller]
fn run(name: &str, args: &[&str]) -> String {
    let out = Command::new(tool(name))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {name}: {e}"));
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{name} {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Encodes 6 s of test pattern (and a tone when `audio`) at `size` and `rate` with a key
/// frame every `gop` frames at 25 frame/s.
#[track_caller]
fn encode(
    dir: &Path,
    name: &str,
    (size, rate): (&str, &str),
    gop: u32,
    mux: Mux,
    audio: bool,
) -> PathBuf {
    let ext = if mux == Mux::Ts { "ts" } else { "mp4" };
    let out = dir.join(format!("{name}.{ext}"));
    let src = format!("testsrc2=size={size}:rate=25");
    let gop = gop.to_string();
    let mut args = vec!["-v", "error", "-y", "-f", "lavfi", "-i", &src];
    if audio {
        args.extend(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"]);
        args.extend(["-map", "0:v", "-map", "1:a", "-c:a", "aac", "-b:a", "64k"]);
    }
    args.extend([
        "-t",
        "6",
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-b:v",
        rate,
    ]);
    args.extend([
        "-g",
        &gop,
        "-keyint_min",
        &gop,
        "-sc_threshold",
        "0",
        "-r",
        "25",
    ]);
    match mux {
        Mux::Ts => args.extend(["-f", "mpegts"]),
        Mux::Cmaf => args.extend(["-movflags", "+cmaf"]),
        Mux::FragKeyframe => {
            args.extend(["-movflags", "+frag_keyframe+empty_moov+default_base_moof"])
        }
    }
    let o = out.to_str().unwrap().to_string();
    args.push(&o);
    run("ffmpeg", &args);
    out
}

/// The 3-rung ladder in `mux`.
fn ladder(vol: &Vol, prefix: &str, mux: Mux, audio: bool) -> Vec<PathBuf> {
    LADDER
        .iter()
        .enumerate()
        .map(|(i, &r)| encode(vol.dir.path(), &format!("{prefix}{i}"), r, 50, mux, audio))
        .collect()
}

/// `isnode ingest --name NAME FILES...`, which must succeed.
fn ingest_title(vol: &Vol, name: &str, files: &[PathBuf]) {
    let mut args = vec!["ingest", "--name", name];
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    let out = isnode(vol, &args);
    assert!(out.status.success(), "{}", text(&out));
}

/// The distinct `(width, height)` of the video streams ffprobe finds at `url`, sorted
/// (ffprobe lists a program's streams and then every stream again).
fn video_sizes(url: &str) -> Vec<(u32, u32)> {
    let csv = run(
        "ffprobe",
        &[
            "-v",
            "error",
            "-select_streams",
            "v",
            "-show_entries",
            "stream=width,height",
            "-of",
            "csv=p=0",
            url,
        ],
    );
    csv.lines()
        .filter_map(|l| {
            let (w, h) = l.trim().split_once(',')?;
            Some((w.parse().ok()?, h.parse().ok()?))
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Copies program `p` of the master playlist to `out` with `-c copy`; it must decode
/// cleanly and last about the title's 6 s.
#[track_caller]
fn copy_variant(master: &str, p: usize, out: &Path) {
    let map = format!("0:p:{p}");
    let o = out.to_str().unwrap();
    run(
        "ffmpeg",
        &[
            "-v", "error", "-y", "-i", master, "-map", &map, "-c", "copy", o,
        ],
    );
    decodes_cleanly(o);
    let (duration, codecs) = serve_support::media::probe(o);
    assert!((duration - 6.0).abs() < 0.5, "{o}: {duration} s");
    assert!(codecs.contains(&"h264".to_string()), "{o}: {codecs:?}");
}

/// Every variant of `master` listed with the ladder's sizes, copied and decoded.
fn check_master(server: &Server, title: &str, vol: &Vol, ext: &str) {
    let master = format!("{}/v1/objects/{title}/master.m3u8", server.url());
    let r = server.req("GET", &format!("/v1/objects/{title}/master.m3u8"), None);
    assert_eq!(r.status, 200, "{}", r.body);
    let variants: Vec<&str> = r
        .body
        .lines()
        .filter(|l| l.starts_with("#EXT-X-STREAM-INF:"))
        .collect();
    assert_eq!(variants.len(), 3, "{}", r.body);
    for key in [
        ":BANDWIDTH=",
        "AVERAGE-BANDWIDTH=",
        "RESOLUTION=",
        "CODECS=\"avc1.",
        "FRAME-RATE=25.000",
    ] {
        assert!(
            variants.iter().all(|v| v.contains(key)),
            "{key} in {}",
            r.body
        );
    }
    let want: Vec<(u32, u32)> = vec![(320, 180), (640, 360), (960, 540)];
    let sizes = video_sizes(&master);
    assert_eq!(sizes, want, "ffprobe of {master}");
    for p in 0..3 {
        copy_variant(&master, p, &vol.path(&format!("{title}-{p}.{ext}")));
    }
}

/// A TS ladder: one title, `ls` shows it, ffprobe and ffmpeg read every variant of its
/// master playlist; `rm` deletes it with its renditions.
#[test]
fn ts_ladder_is_one_title_over_hls() {
    let vol = Vol::create(&[]);
    let files = ladder(&vol, "ts", Mux::Ts, true);
    ingest_title(&vol, "movie", &files);
    let ls = text(&isnode(&vol, &["ls"]));
    assert!(ls.contains("movie@0") && ls.contains("movie@2"), "{ls}");
    let line = ls
        .lines()
        .find(|l| l.starts_with("movie "))
        .unwrap_or_else(|| panic!("{ls}"));
    assert!(
        line.contains("320x180") && line.contains("960x540") && line.contains("mp4a.40.2"),
        "{line}"
    );
    // A single object answers master.m3u8 too; DASH is for CMAF only.
    let server = Server::start(&vol, &[]);
    check_master(&server, "movie", &vol, "ts");
    let one = server.req("GET", "/v1/objects/movie%401/master.m3u8", None);
    assert_eq!(one.status, 200, "{}", one.body);
    assert!(
        one.body.contains("RESOLUTION=640x360")
            && one.body.contains("\nindex.m3u8\n")
            && one.body.ends_with(",URI=\"iframes.m3u8\"\n"),
        "{}",
        one.body
    );
    assert_eq!(
        server
            .req("GET", "/v1/objects/movie/manifest.mpd", None)
            .status,
        400
    );
    check_ts_iframes(&server, "movie", &files);
    assert_eq!(
        server
            .req("GET", "/v1/objects/nothing/master.m3u8", None)
            .status,
        404
    );
    drop(server);
    let out = isnode(&vol, &["rm", "movie"]);
    assert!(out.status.success(), "{}", text(&out));
    let ls = text(&isnode(&vol, &["ls"]));
    assert!(!ls.contains("movie"), "{ls}");
}

/// A CMAF ladder (`+cmaf`, muxed AAC): HLS variants with `EXT-X-MAP`, copied and decoded;
/// the MPD lists every representation; a video-only CMAF ladder's MPD is read by ffprobe
/// and copied by ffmpeg representation by representation, and decodes. ffmpeg's `empty_moov` output (no duration
/// in `mvhd`/`mehd`) is ingested without `--bitrate`.
#[test]
fn cmaf_ladder_over_hls_and_dash() {
    let vol = Vol::create(&[]);
    let files = ladder(&vol, "cmaf", Mux::Cmaf, true);
    ingest_title(&vol, "show", &files);
    let frag = encode(
        vol.dir.path(),
        "frag",
        LADDER[1],
        50,
        Mux::FragKeyframe,
        true,
    );
    let out = isnode(
        &vol,
        &["ingest", "--name", "frag.mp4", frag.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "ingest without --bitrate: {}",
        text(&out)
    );
    let video = ladder(&vol, "video", Mux::Cmaf, false);
    ingest_title(&vol, "silent", &video);
    let server = Server::start(&vol, &[]);

    let media = server.req("GET", "/v1/objects/show%400/index.m3u8", None);
    assert_eq!(media.status, 200, "{}", media.body);
    assert!(
        media.body.contains("#EXT-X-VERSION:7\n")
            && media
                .body
                .contains("#EXT-X-MAP:URI=\"content?isnode_version="),
        "{}",
        media.body
    );
    check_master(&server, "show", &vol, "mp4");
    let fm = server.req("GET", "/v1/objects/frag.mp4/master.m3u8", None);
    assert_eq!(fm.status, 200, "{}", fm.body);
    copy_variant(
        &format!("{}/v1/objects/frag.mp4/master.m3u8", server.url()),
        0,
        &vol.path("frag-0.mp4"),
    );

    check_iframes(&server, "show", &files);

    let mpd = server.req("GET", "/v1/objects/show/manifest.mpd", None);
    assert_eq!(mpd.status, 200, "{}", mpd.body);
    media::validate_mpd(&mpd.body);
    assert_eq!(
        mpd.body.matches("<Representation ").count(),
        3,
        "{}",
        mpd.body
    );
    // Muxed audio: one representation each (ffmpeg 5.1's DASH demuxer cannot take such a
    // representation's tracks apart, so only the text is checked here).
    for size in [
        "width=\"320\" height=\"180\"",
        "width=\"960\" height=\"540\"",
    ] {
        assert!(mpd.body.contains(size), "{size} in {}", mpd.body);
    }
    assert_eq!(mpd.body.matches(",mp4a.40.2\"").count(), 3, "{}", mpd.body);
    let url = format!("{}/v1/objects/silent/manifest.mpd", server.url());
    assert_eq!(video_sizes(&url), vec![(320, 180), (640, 360), (960, 540)]);
    for s in 0..3 {
        let o = vol.path(&format!("dash-{s}.mp4"));
        let o = o.to_str().unwrap();
        run(
            "ffmpeg",
            &[
                "-v",
                "error",
                "-y",
                "-i",
                &url,
                "-map",
                &format!("0:{s}"),
                "-c",
                "copy",
                o,
            ],
        );
        decodes_cleanly(o);
        assert_eq!(
            video_sizes(o),
            vec![[(320, 180), (640, 360), (960, 540)][s]]
        );
        let (duration, _) = serve_support::media::probe(o);
        assert!((duration - 6.0).abs() < 0.5, "{o}: {duration} s");
    }
}

/// The key frames' `(pos, size)` in `file`, as ffprobe reads its video packets.
fn key_packets(file: &Path) -> Vec<(u64, u64)> {
    let csv = run(
        "ffprobe",
        &[
            "-v",
            "error",
            "-select_streams",
            "v",
            "-show_entries",
            "packet=pos,size,flags",
            "-of",
            "csv=p=0",
            file.to_str().unwrap(),
        ],
    );
    csv.lines()
        .filter(|l| l.contains('K'))
        .filter_map(|l| {
            let mut f = l.split(',');
            let size = f.next()?.trim().parse().ok()?;
            let pos = f.next()?.trim().parse().ok()?;
            Some((pos, size))
        })
        .collect()
}

/// The master playlist lists an I-frame playlist per rung; each entry of rung i's
/// `iframes.m3u8` starts at a `moof` before a key frame and ends where ffprobe says that
/// key frame's data ends, one entry per segment (every 2 s GOP of these files).
fn check_iframes(server: &Server, title: &str, files: &[PathBuf]) {
    let master = server.req("GET", &format!("/v1/objects/{title}/master.m3u8"), None);
    assert_eq!(
        master.body.matches("#EXT-X-I-FRAME-STREAM-INF:").count(),
        files.len(),
        "{}",
        master.body
    );
    for (i, file) in files.iter().enumerate() {
        let uri = format!("URI=\"../{title}%40{i}/iframes.m3u8\"\n");
        assert!(master.body.contains(&uri), "{uri} in {}", master.body);
        let p = server.req(
            "GET",
            &format!("/v1/objects/{title}%40{i}/iframes.m3u8"),
            None,
        );
        assert_eq!(p.status, 200, "{}", p.body);
        assert!(p.body.contains("#EXT-X-I-FRAMES-ONLY\n"), "{}", p.body);
        let ranges = byte_ranges(&p.body);
        let keys = key_packets(file);
        assert_eq!(ranges.len(), keys.len(), "{file:?}: {ranges:?} {keys:?}");
        for ((off, len), (pos, size)) in ranges.iter().zip(&keys) {
            assert!(
                off < pos && off + len == pos + size,
                "{file:?}: I-frame range {len}@{off}, key frame {size} bytes at {pos}"
            );
        }
    }
}

/// The ranges `(offset, length)` of an I-frame playlist's `EXT-X-BYTERANGE`s.
fn byte_ranges(playlist: &str) -> Vec<(u64, u64)> {
    playlist
        .lines()
        .filter_map(|l| l.strip_prefix("#EXT-X-BYTERANGE:"))
        .filter_map(|r| {
            let (len, off) = r.split_once('@')?;
            Some((off.parse().ok()?, len.parse().ok()?))
        })
        .collect()
}

/// An MPEG-TS ladder's I-frame playlists: the master lists one per rung
/// (`EXT-X-I-FRAME-STREAM-INF` with `BANDWIDTH`, `RESOLUTION`, the video `CODECS`); each is
/// an RFC 8216 I-frame playlist (`EXT-X-I-FRAMES-ONLY`, version 5 with the PAT + PMT as
/// `EXT-X-MAP`, one `EXT-X-BYTERANGE` per key frame) whose ranges start at the TS packet
/// where ffprobe says each key frame's PES starts, hold at least its bytes and end before
/// the next; ffprobe decodes exactly one frame per key frame from it over HTTP, and
/// ffmpeg decodes it without a complaint.
fn check_ts_iframes(server: &Server, title: &str, files: &[PathBuf]) {
    let master = server.req("GET", &format!("/v1/objects/{title}/master.m3u8"), None);
    let lines: Vec<&str> = master
        .body
        .lines()
        .filter(|l| l.starts_with("#EXT-X-I-FRAME-STREAM-INF:"))
        .collect();
    assert_eq!(lines.len(), files.len(), "{}", master.body);
    for (i, file) in files.iter().enumerate() {
        let (w, h) = [(320, 180), (640, 360), (960, 540)][i];
        let line = lines[i];
        assert!(
            line.contains(":BANDWIDTH=")
                && line.contains(&format!(",RESOLUTION={w}x{h},CODECS=\"avc1."))
                && !line.contains("mp4a")
                && line.ends_with(&format!(",URI=\"../{title}%40{i}/iframes.m3u8\"")),
            "{line}"
        );
        let path = format!("/v1/objects/{title}%40{i}/iframes.m3u8");
        let p = server.req("GET", &path, None);
        assert_eq!(p.status, 200, "{}", p.body);
        assert!(
            p.body.starts_with("#EXTM3U\n#EXT-X-VERSION:5\n")
                && p.body.contains("\n#EXT-X-I-FRAMES-ONLY\n")
                && p.body
                    .contains("\n#EXT-X-MAP:URI=\"content?isnode_version=")
                && p.body.ends_with("#EXT-X-ENDLIST\n"),
            "{}",
            p.body
        );
        let ranges = byte_ranges(&p.body);
        let keys = key_packets(file);
        assert_eq!(ranges.len(), keys.len(), "{file:?}: {ranges:?} {keys:?}");
        let size = std::fs::metadata(file).expect("the rung's file").len();
        let nexts = keys.iter().skip(1).map(|k| k.0).chain([size]);
        for (((off, len), (pos, bytes)), next) in ranges.iter().zip(&keys).zip(nexts) {
            assert!(
                off == pos && *len >= *bytes && off + len <= next,
                "{file:?}: I-frame range {len}@{off}, key frame {bytes} bytes at {pos}, next {next}"
            );
        }
        let url = format!("{}{path}", server.url());
        let frames = run(
            "ffprobe",
            &[
                "-v",
                "error",
                "-select_streams",
                "v",
                "-count_frames",
                "-show_entries",
                "stream=nb_read_frames",
                "-of",
                "csv=p=0",
                &url,
            ],
        );
        let decoded: Vec<u64> = frames
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        assert_eq!(
            decoded.first(),
            Some(&(keys.len() as u64)),
            "{url}: {frames:?}"
        );
        run(
            "ffmpeg",
            &["-v", "error", "-i", &url, "-map", "0:v", "-f", "null", "-"],
        );
    }
}

/// An audio-only CMAF rendition of the 6 s ladder (AAC, 2 s fragments).
fn audio_rendition(vol: &Vol) -> PathBuf {
    let audio = vol.path("audio.mp4");
    let out = audio.to_str().unwrap();
    let mut args: Vec<&str> = "-v error -y -f lavfi -i sine=frequency=440:sample_rate=48000 -t 6 \
         -c:a aac -b:a 64k -movflags +cmaf -frag_duration 2000000"
        .split_whitespace()
        .collect();
    args.push(out);
    run("ffmpeg", &args);
    audio
}

/// `PUT /v1/titles` refuses a misaligned object (uploaded with `first`, the 320x180 rung,
/// as `base`), by name and time, and a rendition of title `web`.
fn refusals(server: &Server, vol: &Vol, first: &Path) {
    let base = server.url();
    let odd = encode(vol.dir.path(), "odd-gop", LADDER[1], 40, Mux::Cmaf, false);
    let out = isnode(vol, &["ls"]);
    assert!(text(&out).contains("web@3"), "{}", text(&out));
    for (name, file) in [("base", first), ("odd", &odd)] {
        let up = command()
            .args(["ingest", "--server", &base, "--name", name])
            .arg(file)
            .output()
            .expect("uploading a file");
        assert!(up.status.success(), "{}", text(&up));
    }
    let body = r#"{"renditions": ["base", "odd"]}"#;
    let r = server.req("PUT", "/v1/titles/bad", Some(body));
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(
        r.body.contains("\\\"odd\\\" is not aligned") && r.body.contains("1.600 s"),
        "{}",
        r.body
    );
    let r = server.req(
        "PUT",
        "/v1/titles/again",
        Some(r#"{"renditions": ["web@1"]}"#),
    );
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(
        r.body.contains("rendition of title \\\"web\\\""),
        "{}",
        r.body
    );
}

/// A rung with another GOP (40 frames) is refused naming the file and the time, and
/// nothing of the title is stored.
#[test]
fn a_misaligned_rung_is_refused_naming_the_file() {
    let vol = Vol::create(&[]);
    let good = encode(vol.dir.path(), "good", LADDER[0], 50, Mux::Ts, true);
    let bad = encode(vol.dir.path(), "bad-gop", LADDER[1], 40, Mux::Ts, true);
    let out = isnode(
        &vol,
        &[
            "ingest",
            "--name",
            "t",
            good.to_str().unwrap(),
            bad.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(
        msg.contains("bad-gop.ts") && msg.contains("1.600 s"),
        "{msg}"
    );
    let ls = text(&isnode(&vol, &["ls"]));
    assert!(!ls.contains("t@0"), "{ls}");
}

/// A title over HTTP: `isnode ingest --server URL --name NAME F0 F1 F2 AUDIO` uploads each
/// file as `NAME@i` and groups them (`PUT /v1/titles/NAME`): the master playlist lists the
/// three video rungs with the audio group, the MPD a video and an audio adaptation set.
/// `PUT /v1/titles` refuses misaligned objects (naming them) and objects of another
/// title; `isnode rm NAME --server` (`DELETE /v1/objects/NAME`) removes the title and its
/// renditions.
#[test]
fn a_title_is_uploaded_and_deleted_over_http() {
    let vol = Vol::create(&[]);
    let mut files = ladder(&vol, "up", Mux::Cmaf, false);
    files.push(audio_rendition(&vol));
    let server = Server::start(&vol, &[]);
    let base = server.url();
    let mut args = vec!["ingest", "--server", &base];
    args.extend(["--name", "web"]);
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    let out = command()
        .args(&args)
        .output()
        .expect("running isnode ingest");
    assert!(out.status.success(), "{}", text(&out));

    let master = server.req("GET", "/v1/objects/web/master.m3u8", None);
    assert_eq!(master.status, 200, "{}", master.body);
    assert_eq!(
        master.body.matches("#EXT-X-STREAM-INF:").count(),
        3,
        "{}",
        master.body
    );
    assert!(
        master.body.contains(
            "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"audio\",NAME=\"audio 0\",DEFAULT=YES,\
             AUTOSELECT=YES,URI=\"../web%403/index.m3u8\"\n"
        ) && master
            .body
            .matches(",mp4a.40.2\",FRAME-RATE=25.000,AUDIO=\"audio\"\n")
            .count()
            == 3,
        "{}",
        master.body
    );
    let url = format!("{}/v1/objects/web/master.m3u8", server.url());
    assert_eq!(video_sizes(&url), vec![(320, 180), (640, 360), (960, 540)]);
    let mpd = server.req("GET", "/v1/objects/web/manifest.mpd", None);
    assert_eq!(mpd.status, 200, "{}", mpd.body);
    media::validate_mpd(&mpd.body);
    assert!(
        mpd.body
            .contains("contentType=\"video\" mimeType=\"video/mp4\"")
            && mpd
                .body
                .contains("contentType=\"audio\" mimeType=\"audio/mp4\"")
            && mpd.body.matches("<Representation ").count() == 4,
        "{}",
        mpd.body
    );

    // Listed: `GET /v1/titles` and `isnode ls --server` (the title under the objects).
    let titles = server.req("GET", "/v1/titles", None);
    assert_eq!(titles.status, 200, "{}", titles.body);
    let t = titles.json();
    assert_eq!(t[0]["name"], "web", "{t}");
    assert_eq!(t[0]["renditions"].as_array().map(Vec::len), Some(4), "{t}");
    let ls = command()
        .args(["ls", "--server", &server.url()])
        .output()
        .expect("running isnode ls");
    let listed = text(&ls);
    assert!(
        ls.status.success() && listed.contains("TITLE") && listed.contains("web@0"),
        "{listed}"
    );

    refusals(&server, &vol, &files[0]);

    let out = command()
        .args(["rm", "web", "--server", &server.url()])
        .output()
        .expect("running isnode rm");
    assert!(out.status.success(), "{}", text(&out));
    let list = server.req("GET", "/v1/objects", None);
    assert!(!list.body.contains("web@"), "{}", list.body);
    assert!(list.body.contains("\"odd\""), "{}", list.body);
    assert_eq!(
        server
            .req("GET", "/v1/objects/web/master.m3u8", None)
            .status,
        404
    );
}
