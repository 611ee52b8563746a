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
-- One flag per type bit, in the order of the bits (and of the tree).
local type_bits = {}
for _, b in ipairs({ { T_SD, "SD" }, { T_POLL, "POLL" }, { T_STAT, "STAT" }, { T_USTAT, "USTAT" },
    { T_BGN, "BGN" }, { T_BGNAK, "BGNAK" }, { T_END, "END" }, { T_ENDAK, "ENDAK" },
    { T_RST, "RST" } }) do
    local key = string.lower(b[2])
    f["t_" .. key] = ProtoField.bool("satstp.types." .. key, b[2], 16, nil, b[1])
    type_bits[#type_bits + 1] = f["t_" .. key]
end
f.t_reserved = ProtoField.uint16("satstp.types.reserved", "Reserved type bits", base.HEX, nil, 0x0E00)
type_bits[#type_bits + 1] = f.t_reserved
f.checksum = ProtoField.uint16("satstp.checksum", "Checksum", base.HEX)
f.checksum_status = ProtoField.string("satstp.checksum.status", "Checksum status")
f.checksum_computed = ProtoField.uint16("satstp.checksum.computed", "Checksum computed", base.HEX)
f.conn_id = ProtoField.uint32("satstp.conn_id", "Connection Identifier", base.HEX)
f.initiator = ProtoField.bool("satstp.initiator", "I (from initiator)", 8, nil, 0x80)
f.instance = ProtoField.uint8("satstp.instance", "Instance", base.DEC, nil, 0x7F)
f.seq = ProtoField.uint24("satstp.seq", "Sequence Number", base.DEC)

-- The fixed fields of the bodies (§3.4-§3.11), each declared as f.<body>_<name> with the filter
-- name satstp.<body>.<name>, and added to the tree in this order by add_body:
-- { name, label, offset in the body, width in bytes, display base (base.DEC), mask, value names,
-- what is wrong when the field is not zero (§3.14 rule 8) }. A field whose width is "flag" is the
-- bit `mask` of the byte at its offset.
local BODY_FIELDS = {
    bgn = {
        { "isn", "ISN", 0, 3 },
        { "flags", "Flags", 3, 1, base.HEX, nil, nil, "BGN flags must be 0" },
        { "rwnd", "Receive Window", 4, 4 }, { "max_datagram", "Max Datagram", 8, 2 },
        { "versions", "Versions", 10, 2, base.HEX }, { "timestamp", "Timestamp", 12, 4 },
    },
    bgnak = {
        { "isn", "ISN", 0, 3 }, { "version", "Version", 3, 1 },
        { "rwnd", "Receive Window", 4, 4 }, { "max_datagram", "Max Datagram", 8, 2 },
        { "reserved", "Reserved", 10, 2, base.HEX },
        { "echo_timestamp", "Echoed Timestamp", 12, 4 },
    },
    rst = {
        { "reason", "Reason", 0, 1, base.DEC, nil, rst_reasons },
        { "reserved", "Reserved", 1, 1, base.HEX }, { "detail", "Detail", 2, 2 },
    },
    poll = {
        { "ns", "N(S)", 0, 3 },
        { "reserved", "Reserved", 3, 1, base.HEX, 0xFE, nil, "POLL reserved bits set" },
        { "keepalive", "K (keepalive)", 3, "flag", nil, 0x01 }, { "timestamp", "Timestamp", 4, 4 },
    },
    stat = {
        { "nr", "N(R)", 0, 3 },
        { "reserved", "Reserved", 3, 1, base.HEX, 0xFE, nil, "STAT reserved bits set" },
        { "partial", "P (partial)", 3, "flag", nil, 0x01 }, { "covered_to", "Covered To", 4, 3 },
        { "echo_timestamp", "Echoed Timestamp", 8, 4 }, { "rwnd", "Receive Window", 12, 4 },
        { "gap_count", "Gap Count", 16, 2 },
    },
    ustat = {
        { "nr", "N(R)", 0, 3 }, { "rwnd", "Receive Window", 4, 4 },
        { "gap_start", "Gap Start", 8, 3 }, { "gap_end", "Gap End", 12, 3 },
    },
    ["end"] = { { "final_seq", "Final Sequence", 0, 3 } },
    endak = { { "final_seq", "Final Sequence", 0, 3 } },
}
local UINT = { ProtoField.uint8, ProtoField.uint16, ProtoField.uint24, ProtoField.uint32 }
for body, fields in pairs(BODY_FIELDS) do
    for _, d in ipairs(fields) do
        local name, label, width, mask = d[1], d[2], d[4], d[6]
        local filter = "satstp." .. body .. "." .. name
        if width == "flag" then
            f[body .. "_" .. name] = ProtoField.bool(filter, label, 8, nil, mask)
        else
            f[body .. "_" .. name] = UINT[width](filter, label, d[5] or base.DEC, d[7], mask)
        end
    end
end

f.stat_gap = ProtoField.bytes("satstp.stat.gap", "Gap")
f.stat_gap_start = ProtoField.uint24("satstp.stat.gap_start", "Gap Start", base.DEC)
f.stat_gap_end = ProtoField.uint24("satstp.stat.gap_end", "Gap End", base.DEC)
f.stat_gaps = ProtoField.string("satstp.stat.gaps", "Gaps (missing SDs)")
f.stat_missing = ProtoField.uint32("satstp.stat.missing", "Missing SDs", base.DEC)

f.ustat_gaps = ProtoField.string("satstp.ustat.gaps", "Gap (missing SDs)")
f.ustat_window_update = ProtoField.bool("satstp.ustat.window_update", "Window update (empty gap)")

f.payload = ProtoField.bytes("satstp.payload", "SD payload")
f.payload_len = ProtoField.uint32("satstp.payload_len", "SD payload length", base.DEC)

f.retransmission = ProtoField.framenum("satstp.analysis.retransmission",
    "Retransmission of the SD first sent in frame")
f.stream = ProtoField.uint32("satstp.analysis.stream", "STP connection index", base.DEC)

-- Expert infos, as ef.<key>: key (satstp.expert.<key>), summary, group, severity.
local ef, experts = {}, {}
for _, e in ipairs({
    { "bad_checksum", "Bad STP checksum", expert.group.CHECKSUM, expert.severity.ERROR },
    { "malformed", "Malformed STP datagram", expert.group.MALFORMED, expert.severity.ERROR },
    { "retransmission", "SD retransmission", expert.group.SEQUENCE, expert.severity.NOTE },
    { "gaps", "Receiver reports missing SDs", expert.group.SEQUENCE, expert.severity.NOTE },
    { "rst", "Connection reset", expert.group.RESPONSE_CODE, expert.severity.WARN },
    { "bad_gaps", "Gap list breaks spec §3.8", expert.group.PROTOCOL, expert.severity.WARN },
}) do
    ef[e[1]] = ProtoExpert.new("satstp.expert." .. e[1], e[2], e[3], e[4])
    experts[#experts + 1] = ef[e[1]]
end
stp.experts = experts

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

-- Adds body `body`'s fixed fields (BODY_FIELDS) at `off` to `t`, flagging a field that must be
-- zero and is not (under its mask: a byte's mask here covers its bits from the lowest up).
local function add_body(t, tvb, off, body)
    for _, d in ipairs(BODY_FIELDS[body]) do
        local width = d[4] == "flag" and 1 or d[4]
        local item = t:add(f[body .. "_" .. d[1]], tvb(off + d[3], width))
        local lowest = 1
        while d[6] and d[6] % (lowest * 2) == 0 do
            lowest = lowest * 2
        end
        if d[8] and math.floor(tvb(off + d[3], width):uint() / lowest) ~= 0 then
            item:add_proto_expert_info(ef.malformed, d[8] .. " (§3.14 rule 8)")
        end
    end
end

-- The Info column's label for the first field of a body (a sequence number), by body.
local INFO_LABEL = { BGN = "ISN=", POLL = "N(S)=", STAT = "N(R)=", USTAT = "N(R)=", END = "END=",
    ENDAK = "ENDAK=" }

-- An RST's reason as expert info and in the Info column.
local function rst_reason(t, tvb, off, info)
    local r = tvb(off, 1):uint()
    t:add_proto_expert_info(ef.rst, "Reset: " .. (rst_reasons[r] or ("reason " .. r)))
    info[#info + 1] = "Reason=" .. (rst_reasons[r] or tostring(r))
end

-- The SDs the gaps of a `body` (STAT or USTAT) name: as text and a count, as expert info, and in
-- the Info column after `label`.
local function show_missing(t, list, body, label, info)
    local text, missing = gap_text(list)
    t:add(f[string.lower(body) .. "_gaps"], text):set_generated()
    t:add(f.stat_missing, missing):set_generated()
    t:add_proto_expert_info(ef.gaps,
        string.format("%s reports %d missing SDs: %s", body, missing, text))
    info[#info + 1] = label .. text
end

-- A STAT's `n` gaps (as far as the capture holds them), checked against §3.8, with the SDs they
-- name.
local function stat_gaps(t, tvb, off, n, info)
    local list = {}
    local g = off + 20
    for _ = 1, n do
        if tvb:len() - g < GAP_LEN then
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
        show_missing(t, list, "STAT", "Gaps=", info)
    end
end

-- A USTAT's one gap, or that it is a window update (empty gap).
local function ustat_gap(t, tvb, off, info)
    local a, b = tvb(off + 8, 3):uint(), tvb(off + 12, 3):uint()
    if a == b then
        t:add(f.ustat_window_update, true):set_generated()
        info[#info + 1] = "window update"
    else
        show_missing(t, { { a, b } }, "USTAT", "Gap=", info)
    end
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
    for _, fld in ipairs(type_bits) do
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

    -- Bodies in their fixed order (§3.1); one that does not fit is left out.
    local off = HEADER_LEN
    for _, b in ipairs(BODY_ORDER) do
        local name, size = b[2], b[3]
        if has(types, b[1]) and len - off >= size then
            -- A STAT's gap list follows its fixed part.
            local gaps = name == "STAT" and tvb(off + 16, 2):uint() or 0
            local t = root:add(stp, tvb(off, math.min(size + GAP_LEN * gaps, len - off)), name)
            add_body(t, tvb, off, string.lower(name))
            if name == "RST" then
                rst_reason(t, tvb, off, info)
            elseif INFO_LABEL[name] then
                info[#info + 1] = INFO_LABEL[name] .. tvb(off, 3):uint()
            end
            if name == "STAT" then
                stat_gaps(t, tvb, off, gaps, info)
            elseif name == "USTAT" then
                ustat_gap(t, tvb, off, info)
            end
            off = off + size + GAP_LEN * gaps
        end
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
