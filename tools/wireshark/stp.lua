-- Wireshark / tshark dissector for STP, the Satellite Transport Protocol of satstp.
--
-- Decodes the datagram format of docs/stp-spec.md §3: the common header, every packet type
-- (BGN, BGNAK, RST, POLL, STAT, USTAT, END, ENDAK, SD) and any combination of them in one
-- datagram, with the field names of the spec. It checks the checksum (§3.3) and the parse
-- rejection rules (§3.14) and reports failures as expert info, lists the gaps a STAT or USTAT
-- names, and marks SDs that were sent before (retransmissions).
--
-- STP runs over UDP and has no port of its own. The dissector finds it by a heuristic (version 1,
-- reserved type bits clear, bodies that exactly fill the datagram) and also on the UDP ports of
-- the preference "STP UDP ports" (Edit > Preferences > Protocols > STP, or
-- `-o stp.udp_ports:4433` with tshark), and through Decode As.
--
-- Install: copy this file into Wireshark's personal Lua plugins folder (Help > About Wireshark >
-- Folders), or load it for one run: `tshark -X lua_script:tools/wireshark/stp.lua -r FILE.pcap`.
-- docs/wireshark.md lists the display filter fields.
--
-- Written for Lua 5.1-5.4 as embedded in Wireshark 3.6 and later; it uses no bit library.

local stp = Proto("satstp", "Satellite Transport Protocol (satstp STP)")

-- Type bits (§3.2) and the fixed order of the bodies in a datagram (§3.1).
local T_SD, T_POLL, T_STAT, T_USTAT = 0x001, 0x002, 0x004, 0x008
local T_BGN, T_BGNAK, T_END, T_ENDAK, T_RST = 0x010, 0x020, 0x040, 0x080, 0x100
local BODY_ORDER = {
    { T_BGN, "BGN", 16 }, { T_BGNAK, "BGNAK", 16 }, { T_RST, "RST", 4 }, { T_POLL, "POLL", 8 },
    { T_STAT, "STAT", 20 }, { T_USTAT, "USTAT", 16 }, { T_END, "END", 4 }, { T_ENDAK, "ENDAK", 4 },
}
local HEADER_LEN = 12
local GAP_LEN = 6
local SEQ_MOD = 16777216 -- 2^24

local rst_reasons = {
    [1] = "UnknownConnection", [2] = "Refused", [3] = "Aborted",
    [4] = "UnsupportedVersion", [5] = "ProtocolViolation", [6] = "Timeout",
}

local function has(types, bit)
    return math.floor(types / bit) % 2 == 1
end

-- Fields. Names follow docs/stp-spec.md: stp.<body>.<field>.
local f = stp.fields
f.version = ProtoField.uint8("satstp.version", "Version", base.DEC, nil, 0xF0)
f.types = ProtoField.uint16("satstp.types", "Types", base.HEX, nil, 0x0FFF)
f.type_names = ProtoField.string("satstp.type_names", "Packet types")
f.t_sd = ProtoField.bool("satstp.types.sd", "SD", 16, nil, T_SD)
f.t_poll = ProtoField.bool("satstp.types.poll", "POLL", 16, nil, T_POLL)
f.t_stat = ProtoField.bool("satstp.types.stat", "STAT", 16, nil, T_STAT)
f.t_ustat = ProtoField.bool("satstp.types.ustat", "USTAT", 16, nil, T_USTAT)
f.t_bgn = ProtoField.bool("satstp.types.bgn", "BGN", 16, nil, T_BGN)
f.t_bgnak = ProtoField.bool("satstp.types.bgnak", "BGNAK", 16, nil, T_BGNAK)
f.t_end = ProtoField.bool("satstp.types.end", "END", 16, nil, T_END)
f.t_endak = ProtoField.bool("satstp.types.endak", "ENDAK", 16, nil, T_ENDAK)
f.t_rst = ProtoField.bool("satstp.types.rst", "RST", 16, nil, T_RST)
f.t_reserved = ProtoField.uint16("satstp.types.reserved", "Reserved type bits", base.HEX, nil, 0x0E00)
f.checksum = ProtoField.uint16("satstp.checksum", "Checksum", base.HEX)
f.checksum_status = ProtoField.string("satstp.checksum.status", "Checksum status")
f.checksum_computed = ProtoField.uint16("satstp.checksum.computed", "Checksum computed", base.HEX)
f.conn_id = ProtoField.uint32("satstp.conn_id", "Connection Identifier", base.HEX)
f.initiator = ProtoField.bool("satstp.initiator", "I (from initiator)", 8, nil, 0x80)
f.instance = ProtoField.uint8("satstp.instance", "Instance", base.DEC, nil, 0x7F)
f.seq = ProtoField.uint24("satstp.seq", "Sequence Number", base.DEC)

f.bgn_isn = ProtoField.uint24("satstp.bgn.isn", "ISN", base.DEC)
f.bgn_flags = ProtoField.uint8("satstp.bgn.flags", "Flags", base.HEX)
f.bgn_rwnd = ProtoField.uint32("satstp.bgn.rwnd", "Receive Window", base.DEC)
f.bgn_max_datagram = ProtoField.uint16("satstp.bgn.max_datagram", "Max Datagram", base.DEC)
f.bgn_versions = ProtoField.uint16("satstp.bgn.versions", "Versions", base.HEX)
f.bgn_timestamp = ProtoField.uint32("satstp.bgn.timestamp", "Timestamp", base.DEC)

f.bgnak_isn = ProtoField.uint24("satstp.bgnak.isn", "ISN", base.DEC)
f.bgnak_version = ProtoField.uint8("satstp.bgnak.version", "Version", base.DEC)
f.bgnak_rwnd = ProtoField.uint32("satstp.bgnak.rwnd", "Receive Window", base.DEC)
f.bgnak_max_datagram = ProtoField.uint16("satstp.bgnak.max_datagram", "Max Datagram", base.DEC)
f.bgnak_reserved = ProtoField.uint16("satstp.bgnak.reserved", "Reserved", base.HEX)
f.bgnak_echo = ProtoField.uint32("satstp.bgnak.echo_timestamp", "Echoed Timestamp", base.DEC)

f.rst_reason = ProtoField.uint8("satstp.rst.reason", "Reason", base.DEC, rst_reasons)
f.rst_reserved = ProtoField.uint8("satstp.rst.reserved", "Reserved", base.HEX)
f.rst_detail = ProtoField.uint16("satstp.rst.detail", "Detail", base.DEC)

f.poll_ns = ProtoField.uint24("satstp.poll.ns", "N(S)", base.DEC)
f.poll_reserved = ProtoField.uint8("satstp.poll.reserved", "Reserved", base.HEX, nil, 0xFE)
f.poll_keepalive = ProtoField.bool("satstp.poll.keepalive", "K (keepalive)", 8, nil, 0x01)
f.poll_timestamp = ProtoField.uint32("satstp.poll.timestamp", "Timestamp", base.DEC)

f.stat_nr = ProtoField.uint24("satstp.stat.nr", "N(R)", base.DEC)
f.stat_reserved = ProtoField.uint8("satstp.stat.reserved", "Reserved", base.HEX, nil, 0xFE)
f.stat_partial = ProtoField.bool("satstp.stat.partial", "P (partial)", 8, nil, 0x01)
f.stat_covered_to = ProtoField.uint24("satstp.stat.covered_to", "Covered To", base.DEC)
f.stat_echo = ProtoField.uint32("satstp.stat.echo_timestamp", "Echoed Timestamp", base.DEC)
f.stat_rwnd = ProtoField.uint32("satstp.stat.rwnd", "Receive Window", base.DEC)
f.stat_gap_count = ProtoField.uint16("satstp.stat.gap_count", "Gap Count", base.DEC)
f.stat_gap = ProtoField.bytes("satstp.stat.gap", "Gap")
f.stat_gap_start = ProtoField.uint24("satstp.stat.gap_start", "Gap Start", base.DEC)
f.stat_gap_end = ProtoField.uint24("satstp.stat.gap_end", "Gap End", base.DEC)
f.stat_gaps = ProtoField.string("satstp.stat.gaps", "Gaps (missing SDs)")
f.stat_missing = ProtoField.uint32("satstp.stat.missing", "Missing SDs", base.DEC)

f.ustat_nr = ProtoField.uint24("satstp.ustat.nr", "N(R)", base.DEC)
f.ustat_rwnd = ProtoField.uint32("satstp.ustat.rwnd", "Receive Window", base.DEC)
f.ustat_gap_start = ProtoField.uint24("satstp.ustat.gap_start", "Gap Start", base.DEC)
f.ustat_gap_end = ProtoField.uint24("satstp.ustat.gap_end", "Gap End", base.DEC)
f.ustat_gaps = ProtoField.string("satstp.ustat.gaps", "Gap (missing SDs)")
f.ustat_window_update = ProtoField.bool("satstp.ustat.window_update", "Window update (empty gap)")

f.end_final = ProtoField.uint24("satstp.end.final_seq", "Final Sequence", base.DEC)
f.endak_final = ProtoField.uint24("satstp.endak.final_seq", "Final Sequence", base.DEC)

f.payload = ProtoField.bytes("satstp.payload", "SD payload")
f.payload_len = ProtoField.uint32("satstp.payload_len", "SD payload length", base.DEC)

f.retransmission = ProtoField.framenum("satstp.analysis.retransmission",
    "Retransmission of the SD first sent in frame")
f.stream = ProtoField.uint32("satstp.analysis.stream", "STP connection index", base.DEC)

local ef = {
    bad_checksum = ProtoExpert.new("satstp.expert.bad_checksum", "Bad STP checksum",
        expert.group.CHECKSUM, expert.severity.ERROR),
    malformed = ProtoExpert.new("satstp.expert.malformed", "Malformed STP datagram",
        expert.group.MALFORMED, expert.severity.ERROR),
    retransmission = ProtoExpert.new("satstp.expert.retransmission", "SD retransmission",
        expert.group.SEQUENCE, expert.severity.NOTE),
    gaps = ProtoExpert.new("satstp.expert.gaps", "Receiver reports missing SDs",
        expert.group.SEQUENCE, expert.severity.NOTE),
    rst = ProtoExpert.new("satstp.expert.rst", "Connection reset",
        expert.group.RESPONSE_CODE, expert.severity.WARN),
    bad_gaps = ProtoExpert.new("satstp.expert.bad_gaps", "Gap list breaks spec §3.8",
        expert.group.PROTOCOL, expert.severity.WARN),
}
stp.experts = { ef.bad_checksum, ef.malformed, ef.retransmission, ef.gaps, ef.rst, ef.bad_gaps }

stp.prefs.udp_ports = Pref.range("STP UDP ports", "",
    "UDP ports always decoded as STP (the heuristic finds STP on other ports)", 65535)
stp.prefs.heuristic = Pref.bool("Find STP by heuristic", true,
    "Try STP on every UDP datagram whose header and bodies are well formed")

-- Sequence analysis state, rebuilt when a file is (re)loaded. Keyed by frame number so that
-- later passes and random access see what the first pass computed.
local first_sent = {} -- "conn/I/instance/seq" -> frame of the first transmission
local frame_retx = {} -- frame number -> frame of the first transmission of its SD
local streams = {}    -- "conn/instance" -> connection index
local n_streams = 0

function stp.init()
    first_sent, frame_retx, streams, n_streams = {}, {}, {}, 0
end

-- RFC 1071 checksum: the folded one's-complement sum over the datagram (0xFFFF when valid,
-- §3.3), and the checksum the sender should have stored (field taken as zero).
local function ones_sum(tvb, len, skip_checksum)
    local sum = 0
    local i = 0
    while i + 1 < len do
        if not (skip_checksum and i == 2) then
            sum = sum + tvb(i, 2):uint()
        end
        i = i + 2
    end
    if i < len then
        sum = sum + tvb(i, 1):uint() * 256
    end
    while sum > 0xFFFF do
        sum = (sum % 65536) + math.floor(sum / 65536)
    end
    return sum
end

-- Walks the bodies (§3.1, §3.14 rule 7) and returns the payload offset, or nil and the reason
-- the datagram is malformed.
local function layout(tvb, types)
    -- The datagram's length on the wire: a capture may hold less (headers-only captures).
    local len = tvb:reported_len()
    local off = HEADER_LEN
    for _, b in ipairs(BODY_ORDER) do
        if has(types, b[1]) then
            local need = b[3]
            if b[1] == T_STAT then
                if len - off < need then
                    return nil, "STAT truncated"
                end
                if tvb:len() < off + 18 then
                    return nil, "STAT cut by the capture"
                end
                need = need + GAP_LEN * tvb(off + 16, 2):uint()
            end
            if len - off < need then
                return nil, b[2] .. " truncated"
            end
            off = off + need
        end
    end
    if has(types, T_SD) and off >= len then
        return nil, "SD without payload"
    end
    if not has(types, T_SD) and off < len then
        return nil, (len - off) .. " trailing bytes after the last body"
    end
    return off, nil
end

-- Header checks of §3.14 rules 1-5; returns the types or nil and a reason.
local function header_ok(tvb)
    if tvb:len() < HEADER_LEN then
        return nil, "shorter than the 12-byte header"
    end
    local version = math.floor(tvb(0, 1):uint() / 16)
    local types = tvb(0, 2):uint() % 4096
    if version ~= 1 then
        return nil, "version " .. version .. " is not 1"
    end
    if types >= 0x200 then
        return nil, "reserved type bits set"
    end
    if types == 0 then
        return nil, "no packet type"
    end
    if not has(types, T_SD) and tvb(9, 3):uint() ~= 0 then
        return nil, "sequence number without SD"
    end
    return types, nil
end

local function type_names(types)
    local names = {}
    for _, b in ipairs(BODY_ORDER) do
        if has(types, b[1]) then
            names[#names + 1] = b[2]
        end
    end
    if has(types, T_SD) then
        table.insert(names, 1, "SD")
    end
    return table.concat(names, "|")
end

-- a precedes or equals b in 24-bit serial arithmetic (§6.1).
local function serial_le(a, b)
    return (b - a) % SEQ_MOD < SEQ_MOD / 2
end

-- What is wrong with a STAT's gap list (§3.8: the first gap starts at N(R); gaps are non-empty,
-- ascending, non-overlapping and within [N(R), Covered To]), or nil.
local function gap_list_fault(nr, covered_to, list)
    if not serial_le(nr, covered_to) then
        return "Covered To precedes N(R)"
    end
    if #list > 0 and list[1][1] ~= nr then
        return "the first gap does not start at N(R)"
    end
    local prev = nr
    for i, g in ipairs(list) do
        if g[1] == g[2] or not serial_le(g[1], g[2]) then
            return "gap " .. i .. " is empty or reversed"
        end
        if not serial_le(prev, g[1]) then
            return "gap " .. i .. " overlaps or precedes the one before"
        end
        if not serial_le(g[2], covered_to) then
            return "gap " .. i .. " ends beyond Covered To"
        end
        prev = g[2]
    end
    return nil
end

-- Gaps as "[a,b) [c,d)" and the number of SDs they name (serial arithmetic, §6.1).
local function gap_text(list)
    local parts, missing = {}, 0
    for _, g in ipairs(list) do
        parts[#parts + 1] = "[" .. g[1] .. "," .. g[2] .. ")"
        missing = missing + (g[2] - g[1]) % SEQ_MOD
    end
    return table.concat(parts, " "), missing
end

local function dissect(tvb, pinfo, tree)
    -- Bodies are read from the captured bytes; lengths on the wire come from reported_len.
    local len = tvb:len()
    local wire_len = tvb:reported_len()
    pinfo.cols.protocol:set("STP")
    local root = tree:add(stp, tvb(), "Satellite Transport Protocol")
    local types, why = header_ok(tvb)
    if len < HEADER_LEN then
        root:add_proto_expert_info(ef.malformed, why)
        return
    end

    -- Common header (§3.2).
    root:add(f.version, tvb(0, 1))
    local traw = tvb(0, 2):uint() % 4096
    local tt = root:add(f.types, tvb(0, 2))
    for _, fld in ipairs({ f.t_sd, f.t_poll, f.t_stat, f.t_ustat, f.t_bgn, f.t_bgnak, f.t_end,
        f.t_endak, f.t_rst, f.t_reserved }) do
        tt:add(fld, tvb(0, 2))
    end
    local names = type_names(traw)
    root:add(f.type_names, tvb(0, 2), names):set_generated()
    local ck_item = root:add(f.checksum, tvb(2, 2))
    local conn = tvb(4, 4):uint()
    root:add(f.conn_id, tvb(4, 4))
    root:add(f.initiator, tvb(8, 1))
    root:add(f.instance, tvb(8, 1))
    root:add(f.seq, tvb(9, 3))
    local from_init = tvb(8, 1):uint() >= 128
    local instance = tvb(8, 1):uint() % 128
    local seq = tvb(9, 3):uint()

    -- Checksum (§3.3).
    local sum = ones_sum(tvb, len, false)
    if len < wire_len then
        ck_item:add(f.checksum_status, tvb(2, 2), "Unverified"):set_generated()
    elseif sum == 0xFFFF then
        ck_item:add(f.checksum_status, tvb(2, 2), "Good"):set_generated()
    else
        local want = 0xFFFF - ones_sum(tvb, len, true)
        ck_item:add(f.checksum_status, tvb(2, 2), "Bad"):set_generated()
        ck_item:add(f.checksum_computed, tvb(2, 2), want):set_generated()
        ck_item:add_proto_expert_info(ef.bad_checksum,
            string.format("Bad checksum 0x%04x, should be 0x%04x", tvb(2, 2):uint(), want))
    end

    local info = { names }
    if types == nil then
        root:add_proto_expert_info(ef.malformed, why)
        pinfo.cols.info:set(table.concat(info, " ") .. " [malformed: " .. why .. "]")
        return
    end
    local payload_off, lwhy = layout(tvb, types)
    if payload_off == nil then
        root:add_proto_expert_info(ef.malformed, lwhy)
    end

    local key = string.format("%08x/%d", conn, instance)
    if streams[key] == nil then
        streams[key] = n_streams
        n_streams = n_streams + 1
    end
    root:add(f.stream, streams[key]):set_generated()
    info[#info + 1] = string.format("Id=0x%08x%s", conn, from_init and " I" or "")
    if has(types, T_SD) then
        info[#info + 1] = "Seq=" .. seq
    end

    -- Bodies in their fixed order (§3.1); stop at the first one that does not fit.
    local off = HEADER_LEN
    local function fits(n)
        return len - off >= n
    end
    if has(types, T_BGN) and fits(16) then
        local t = root:add(stp, tvb(off, 16), "BGN")
        t:add(f.bgn_isn, tvb(off, 3))
        local fl = t:add(f.bgn_flags, tvb(off + 3, 1))
        if tvb(off + 3, 1):uint() ~= 0 then
            fl:add_proto_expert_info(ef.malformed, "BGN flags must be 0 (§3.14 rule 8)")
        end
        t:add(f.bgn_rwnd, tvb(off + 4, 4))
        t:add(f.bgn_max_datagram, tvb(off + 8, 2))
        t:add(f.bgn_versions, tvb(off + 10, 2))
        t:add(f.bgn_timestamp, tvb(off + 12, 4))
        info[#info + 1] = "ISN=" .. tvb(off, 3):uint()
        off = off + 16
    end
    if has(types, T_BGNAK) and fits(16) then
        local t = root:add(stp, tvb(off, 16), "BGNAK")
        t:add(f.bgnak_isn, tvb(off, 3))
        t:add(f.bgnak_version, tvb(off + 3, 1))
        t:add(f.bgnak_rwnd, tvb(off + 4, 4))
        t:add(f.bgnak_max_datagram, tvb(off + 8, 2))
        t:add(f.bgnak_reserved, tvb(off + 10, 2))
        t:add(f.bgnak_echo, tvb(off + 12, 4))
        off = off + 16
    end
    if has(types, T_RST) and fits(4) then
        local t = root:add(stp, tvb(off, 4), "RST")
        local r = tvb(off, 1):uint()
        t:add(f.rst_reason, tvb(off, 1))
        t:add(f.rst_reserved, tvb(off + 1, 1))
        t:add(f.rst_detail, tvb(off + 2, 2))
        t:add_proto_expert_info(ef.rst, "Reset: " .. (rst_reasons[r] or ("reason " .. r)))
        info[#info + 1] = "Reason=" .. (rst_reasons[r] or tostring(r))
        off = off + 4
    end
    if has(types, T_POLL) and fits(8) then
        local t = root:add(stp, tvb(off, 8), "POLL")
        t:add(f.poll_ns, tvb(off, 3))
        local rs = t:add(f.poll_reserved, tvb(off + 3, 1))
        if tvb(off + 3, 1):uint() >= 2 then
            rs:add_proto_expert_info(ef.malformed, "POLL reserved bits set (§3.14 rule 8)")
        end
        t:add(f.poll_keepalive, tvb(off + 3, 1))
        t:add(f.poll_timestamp, tvb(off + 4, 4))
        info[#info + 1] = "N(S)=" .. tvb(off, 3):uint()
        off = off + 8
    end
    if has(types, T_STAT) and fits(20) then
        local n = tvb(off + 16, 2):uint()
        local body = math.min(20 + GAP_LEN * n, len - off)
        local t = root:add(stp, tvb(off, body), "STAT")
        t:add(f.stat_nr, tvb(off, 3))
        local rs = t:add(f.stat_reserved, tvb(off + 3, 1))
        if tvb(off + 3, 1):uint() >= 2 then
            rs:add_proto_expert_info(ef.malformed, "STAT reserved bits set (§3.14 rule 8)")
        end
        t:add(f.stat_partial, tvb(off + 3, 1))
        t:add(f.stat_covered_to, tvb(off + 4, 3))
        t:add(f.stat_echo, tvb(off + 8, 4))
        t:add(f.stat_rwnd, tvb(off + 12, 4))
        t:add(f.stat_gap_count, tvb(off + 16, 2))
        info[#info + 1] = "N(R)=" .. tvb(off, 3):uint()
        local list = {}
        local g = off + 20
        for _ = 1, n do
            if len - g < GAP_LEN then
                break
            end
            local a, b = tvb(g, 3):uint(), tvb(g + 3, 3):uint()
            local gt = t:add(f.stat_gap, tvb(g, GAP_LEN))
            gt:set_text(string.format("Gap [%d, %d)", a, b))
            gt:add(f.stat_gap_start, tvb(g, 3))
            gt:add(f.stat_gap_end, tvb(g + 3, 3))
            list[#list + 1] = { a, b }
            g = g + GAP_LEN
        end
        local fault = gap_list_fault(tvb(off, 3):uint(), tvb(off + 4, 3):uint(), list)
        if fault ~= nil then
            t:add_proto_expert_info(ef.bad_gaps, "Gap list breaks spec §3.8: " .. fault)
        end
        if #list > 0 then
            local text, missing = gap_text(list)
            t:add(f.stat_gaps, text):set_generated()
            t:add(f.stat_missing, missing):set_generated()
            t:add_proto_expert_info(ef.gaps,
                string.format("STAT reports %d missing SDs: %s", missing, text))
            info[#info + 1] = "Gaps=" .. text
        end
        off = off + 20 + GAP_LEN * n
    end
    if has(types, T_USTAT) and fits(16) then
        local t = root:add(stp, tvb(off, 16), "USTAT")
        t:add(f.ustat_nr, tvb(off, 3))
        t:add(f.ustat_rwnd, tvb(off + 4, 4))
        t:add(f.ustat_gap_start, tvb(off + 8, 3))
        t:add(f.ustat_gap_end, tvb(off + 12, 3))
        local a, b = tvb(off + 8, 3):uint(), tvb(off + 12, 3):uint()
        info[#info + 1] = "N(R)=" .. tvb(off, 3):uint()
        if a == b then
            t:add(f.ustat_window_update, true):set_generated()
            info[#info + 1] = "window update"
        else
            local text, missing = gap_text({ { a, b } })
            t:add(f.ustat_gaps, text):set_generated()
            t:add(f.stat_missing, missing):set_generated()
            t:add_proto_expert_info(ef.gaps,
                string.format("USTAT reports %d missing SDs: %s", missing, text))
            info[#info + 1] = "Gap=" .. text
        end
        off = off + 16
    end
    if has(types, T_END) and fits(4) then
        local t = root:add(stp, tvb(off, 4), "END")
        t:add(f.end_final, tvb(off, 3))
        info[#info + 1] = "END=" .. tvb(off, 3):uint()
        off = off + 4
    end
    if has(types, T_ENDAK) and fits(4) then
        local t = root:add(stp, tvb(off, 4), "ENDAK")
        t:add(f.endak_final, tvb(off, 3))
        info[#info + 1] = "ENDAK=" .. tvb(off, 3):uint()
        off = off + 4
    end

    -- SD payload (§3.12) and retransmission analysis.
    if has(types, T_SD) and payload_off ~= nil then
        local plen = wire_len - payload_off
        root:add(f.payload_len, plen):set_generated()
        if len > payload_off then
            root:add(f.payload, tvb(payload_off, len - payload_off))
        end
        info[#info + 1] = "Len=" .. plen
        -- A file's packets are visited in order on the first pass; later passes reuse it.
        if not pinfo.visited then
            local sd_key = string.format("%s/%s/%d", key, from_init and "i" or "r", seq)
            local first = first_sent[sd_key]
            if first == nil then
                first_sent[sd_key] = pinfo.number
            elseif first ~= pinfo.number then
                frame_retx[pinfo.number] = first
            end
        end
        local first = frame_retx[pinfo.number]
        if first ~= nil then
            local item = root:add(f.retransmission, first)
            item:set_generated()
            item:add_proto_expert_info(ef.retransmission,
                "Retransmission of SD " .. seq .. " (first sent in frame " .. first .. ")")
            info[#info + 1] = "[retransmission]"
        end
    end
    root:append_text(", " .. names)
    pinfo.cols.info:set(table.concat(info, " "))
end

function stp.dissector(tvb, pinfo, tree)
    dissect(tvb, pinfo, tree)
    return tvb:len()
end

-- Heuristic: the header passes §3.14 rules 1-5 and the bodies fill the datagram exactly
-- (rules 7, 9, 10). The checksum is not required, so that damaged datagrams still show up, with
-- their bad checksum flagged.
local function heuristic(tvb, pinfo, tree)
    if not stp.prefs.heuristic then
        return false
    end
    local types = header_ok(tvb)
    if types == nil or layout(tvb, types) == nil then
        return false
    end
    dissect(tvb, pinfo, tree)
    return true
end
stp:register_heuristic("udp", heuristic)

local udp_table = DissectorTable.get("udp.port")
local registered_ports = ""
function stp.prefs_changed()
    if registered_ports ~= "" then
        udp_table:remove(registered_ports, stp)
    end
    registered_ports = stp.prefs.udp_ports
    if registered_ports ~= "" then
        udp_table:add(registered_ports, stp)
    end
end
udp_table:add_for_decode_as(stp)
