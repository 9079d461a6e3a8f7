-- Wireshark dissector for the MRC packets of the testbed (docs/wire-format.md).
--
-- Dissects every MRC header (BTH, RETH, ImmDt, METH, TSETH, SETH + CC_STATE, NETH, the
-- reliability probe, EV probe and EV probe reply), checks the ICRC, shows the EV id the
-- inner UDP source port and flow label carry, and decodes the outer SRv6 uSID carrier
-- (and any SRH segments) to plane and the uSIDs still ahead of the packet: switch tier and
-- index, or host number. Switch names are the fabric plan's business, not the packet's,
-- so they are not shown (`mrc-testbed` prints the plan).
--
-- Registered on UDP port 4791 (the RoCEv2 port, which MRC uses), where it replaces the
-- stock InfiniBand/RoCE dissector; the preference mrc.udp_port = 0 gives the port back to
-- the stock one, which reads MRC's BTH, RETH and ImmDt as IBA fields. Use with `tshark -X lua_script:wireshark/mrc.lua`, or install into the
-- personal Lua plugins folder (scripts/setup.sh does).
--
-- The numbers below mirror testbed/nic/wire/layout.py; tests/integration/test_pcap_dissection.py
-- holds every field this dissector shows to what the project's decoder reads.

-- Loaded once: an installed plugin and `-X lua_script:` of this file share one Lua state.
for _, name in ipairs(Dissector.list()) do
    if name == "mrc" then return end
end

local UDP_PORT = 4791
local BTH_LEN, RETH_LEN, IMMDT_LEN, METH_LEN, TSETH_LEN, ICRC_LEN = 12, 16, 4, 4, 4, 4

local OP = {
    WRITE_FIRST = 0x06, WRITE_MIDDLE = 0x07, WRITE_LAST = 0x08,
    WRITE_LAST_WITH_IMM = 0x09, WRITE_ONLY = 0x0A, WRITE_ONLY_WITH_IMM = 0x0B,
    SACK = 0xC0, NACK = 0xC1, RELIABILITY_PROBE = 0xC2, EV_PROBE = 0xC3, EV_PROBE_REPLY = 0xC4,
    PORT_STATUS_UPDATE = 0xC5,  -- endpoint operation, wire-format.md §6.4
    CNP = 0x81,  -- RoCEv2's congestion notification packet, DCQCN's
}
local opcode_names = {}
for name, value in pairs(OP) do opcode_names[value] = name end

local FLAG_ACK_REQUEST, FLAG_RETRANSMIT, FLAG_TIMESTAMP = 0x80, 0x40, 0x20
local FLAG_TRIMMED, FLAG_TRIMMED_LASTHOP = 0x10, 0x08

local verdict_names = { [0] = "NONE", [1] = "SKIP_ONCE", [2] = "ALWAYS_SKIP" }
local reason_names = {
    [1] = "TRIMMED", [2] = "TRIMMED_LASTHOP", [3] = "NO_BITMAP", [4] = "NO_PKT_BUFFER",
    [5] = "NO_RESOURCE", [6] = "PSN_OOR_WINDOW", [7] = "UNEXP_EVENT",
}
-- testbed/fabric/usid_plan.py: uSID top nibble = tier; 0x8000 + n = host n's port.
local tier_names = { [1] = "edge/leaf", [2] = "agg/spine", [3] = "core" }
local BLOCK_BASE, HOST_USID_BASE = 0xFCBBBB00, 0x8000

local mrc = Proto("mrc", "Multipath Reliable Connection")

local F = {
    opcode = ProtoField.uint8("mrc.opcode", "Opcode", base.HEX, opcode_names),
    iba_byte1 = ProtoField.uint8("mrc.iba_byte1", "SE/MigReq/PadCnt/TVer (zero)", base.HEX),
    pkey = ProtoField.uint16("mrc.pkey", "P_Key", base.HEX),
    version = ProtoField.uint8("mrc.version", "MRC version", base.DEC),
    dest_qp = ProtoField.uint24("mrc.dest_qp", "Destination QP", base.HEX),
    flags = ProtoField.uint8("mrc.flags", "Flags", base.HEX),
    ack_req = ProtoField.bool("mrc.flags.ack_req", "ACK_REQ (IBA AckReq)", 8, nil, FLAG_ACK_REQUEST),
    retx = ProtoField.bool("mrc.flags.retx", "RETX", 8, nil, FLAG_RETRANSMIT),
    ts = ProtoField.bool("mrc.flags.ts", "TS", 8, nil, FLAG_TIMESTAMP),
    trimmed = ProtoField.bool("mrc.flags.trimmed", "TRIMMED", 8, nil, FLAG_TRIMMED),
    trimmed_lasthop = ProtoField.bool("mrc.flags.trimmed_lasthop", "TRIMMED_LASTHOP", 8, nil,
                                      FLAG_TRIMMED_LASTHOP),
    flags_reserved = ProtoField.uint8("mrc.flags.reserved", "Reserved", base.HEX, nil, 0x07),
    psn = ProtoField.uint24("mrc.psn", "PSN", base.DEC),
    cack_psn = ProtoField.uint24("mrc.cack_psn", "Cumulative PSN", base.DEC),
    probe_id = ProtoField.uint24("mrc.probe_id", "Probe id", base.DEC),
    req_id = ProtoField.uint24("mrc.req_id", "Request id", base.DEC),
    ev = ProtoField.uint32("mrc.ev", "EV (UDP sport + flow label)", base.HEX),
    remote_offset = ProtoField.uint64("mrc.reth.remote_offset", "Remote offset", base.HEX),
    rkey = ProtoField.uint32("mrc.reth.rkey", "R_Key", base.HEX),
    total_length = ProtoField.uint32("mrc.reth.total_length", "Total length", base.DEC),
    imm = ProtoField.uint32("mrc.immdt", "Immediate data", base.HEX),
    msn = ProtoField.uint16("mrc.meth.msn", "MSN", base.DEC),
    rqmsn = ProtoField.uint16("mrc.meth.rqmsn", "RQMSN", base.DEC),
    tx_timestamp = ProtoField.uint32("mrc.tseth.tx_timestamp", "TX timestamp (us)", base.DEC),
    payload_length = ProtoField.uint32("mrc.payload_length", "Payload length", base.DEC),
    sack_offset = ProtoField.uint16("mrc.seth.sack_offset", "SACK offset", base.DEC),
    sack_flags = ProtoField.uint8("mrc.seth.flags", "SACK flags", base.HEX),
    verdict = ProtoField.uint8("mrc.seth.verdict", "Verdict", base.DEC, verdict_names, 0x03),
    probe_reply = ProtoField.bool("mrc.seth.probe_reply", "PROBE_REPLY", 8, nil, 0x04),
    mpr = ProtoField.uint8("mrc.seth.mpr", "MPR (128-PSN units)", base.DEC),
    bitmap = ProtoField.uint64("mrc.seth.bitmap", "Bitmap", base.HEX),
    reflected_ev = ProtoField.uint32("mrc.reflected_ev", "Reflected EV", base.HEX),
    trigger_psn = ProtoField.uint24("mrc.seth.trigger_psn", "Trigger PSN", base.DEC),
    ts_echo = ProtoField.uint32("mrc.ts_echo", "Timestamp echo (us)", base.DEC),
    service_time_ns = ProtoField.uint32("mrc.service_time_ns", "Service time (ns)", base.DEC),
    ooo_count = ProtoField.uint16("mrc.cc.ooo_count", "Out-of-order count", base.DEC),
    rcv_cwnd_pen = ProtoField.uint8("mrc.cc.rcv_cwnd_pen", "Receiver cwnd penalty", base.DEC),
    received_bytes = ProtoField.uint64("mrc.cc.received_bytes", "Received bytes", base.DEC),
    reason = ProtoField.uint8("mrc.neth.reason", "Reason", base.DEC, reason_names),
    nack_cack_psn = ProtoField.uint24("mrc.neth.cack_psn", "Cumulative PSN", base.DEC),
    probed_ev = ProtoField.uint32("mrc.evp.ev", "Probed EV", base.HEX),
    port = ProtoField.uint8("mrc.evp.port", "Prober port", base.DEC),
    rx_port = ProtoField.uint8("mrc.evp.rx_port", "Responder port", base.DEC),
    ep_op = ProtoField.uint8("mrc.erth.ep_op", "Endpoint operation", base.HEX,
                             { [1] = "PORT_STATUS" }),
    port_status = ProtoField.uint32("mrc.psu.port_status", "Port status (bit p-1 = port p up)",
                                    base.HEX),
    ports_changed = ProtoField.uint32("mrc.psu.changed", "Ports changed", base.HEX),
    port_count = ProtoField.uint8("mrc.psu.port_count", "Port count", base.DEC),
    reserved = ProtoField.bytes("mrc.reserved", "Reserved"),
    icrc = ProtoField.uint32("mrc.icrc", "ICRC", base.HEX),
    icrc_good = ProtoField.bool("mrc.icrc.good", "ICRC good"),
    plane = ProtoField.uint8("mrc.carrier.plane", "Plane", base.DEC),
    usid = ProtoField.uint16("mrc.carrier.usid", "uSID", base.HEX),
    hop = ProtoField.string("mrc.carrier.hop", "Hop"),
}
mrc.fields = F

local ef_bad_icrc = ProtoExpert.new("mrc.icrc.bad", "ICRC does not match", expert.group.CHECKSUM,
                                    expert.severity.ERROR)
local ef_short = ProtoExpert.new("mrc.short", "Packet shorter than its headers",
                                 expert.group.MALFORMED, expert.severity.ERROR)
mrc.experts = { ef_bad_icrc, ef_short }

local f_flow = Field.new("ipv6.flow")
local f_ipv6_dst = Field.new("ipv6.dst")
local f_srh_addr = Field.new("ipv6.routing.srh.addr")
local f_udp_srcport = Field.new("udp.srcport")

-- zlib's crc32 (reflected, polynomial 0xEDB88320), as the ICRC (wire-format.md §7).
local crc_table = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if bit32.band(c, 1) == 1 then c = bit32.bxor(bit32.rshift(c, 1), 0xEDB88320)
        else c = bit32.rshift(c, 1) end
    end
    crc_table[i] = c
end

local function crc32(bytes, len)
    local crc = 0xFFFFFFFF
    for i = 0, len - 1 do
        crc = bit32.bxor(crc_table[bit32.band(bit32.bxor(crc, bytes:get_index(i)), 0xFF)],
                         bit32.rshift(crc, 8))
    end
    return bit32.bxor(crc, 0xFFFFFFFF)
end

local function last_value(field)
    local all = { field() }
    return all[#all]
end

-- The uSIDs an outer IPv6 address carries: block fcbb:bb0P::/32, then 16-bit uSIDs up to
-- the first zero (testbed/fabric/usid_plan.py, carrier_usids).
local function add_carrier(tree, fieldinfo, label)
    local range = fieldinfo.range
    local block = range(0, 4):uint()
    if bit32.band(block, 0xFFFFFF00) ~= BLOCK_BASE then return end
    local sub = tree:add(range, label .. ": " .. tostring(fieldinfo.value))
    sub:add(F.plane, range(3, 1))
    for i = 0, 5 do
        local usid = range(4 + 2 * i, 2):uint()
        if usid == 0 then break end
        sub:add(F.usid, range(4 + 2 * i, 2))
        local hop
        if usid >= HOST_USID_BASE then
            hop = string.format("host h%d", usid - HOST_USID_BASE)
        else
            hop = string.format("%s switch %d", tier_names[bit32.rshift(usid, 12)] or "tier ?",
                                bit32.band(usid, 0x0FFF))
        end
        sub:add(F.hop, range(4 + 2 * i, 2), hop)
    end
end

local function add_fabric(tree)
    local dsts = { f_ipv6_dst() }
    if #dsts >= 2 then add_carrier(tree, dsts[1], "Carrier (outer destination)") end
    for i, segment in ipairs({ f_srh_addr() }) do
        add_carrier(tree, segment, string.format("SRH segment %d", i - 1))
    end
end

local function add_ev(tree, tvb_range)
    local flow, sport = last_value(f_flow), last_value(f_udp_srcport)
    if flow == nil or sport == nil then return end
    local ev = bit32.bor(bit32.lshift(bit32.band(flow.value, 0xFFFF), 16), sport.value)
    tree:add(F.ev, ev):set_generated()
end

-- Data packets: IBA's headers where IBA puts them for the opcode, then METH and [TSETH].
local function data_headers(opcode, timestamp)
    local headers
    if opcode == OP.WRITE_LAST_WITH_IMM then headers = { "ImmDt", "RETH" }
    elseif opcode == OP.WRITE_ONLY_WITH_IMM then headers = { "RETH", "ImmDt" }
    else headers = { "RETH" } end
    headers[#headers + 1] = "METH"
    if timestamp then headers[#headers + 1] = "TSETH" end
    return headers
end

local header_len = { RETH = RETH_LEN, ImmDt = IMMDT_LEN, METH = METH_LEN, TSETH = TSETH_LEN }

local function add_header(tree, name, r)
    if name == "RETH" then
        local sub = tree:add(r, "RETH")
        sub:add(F.remote_offset, r(0, 8))
        sub:add(F.rkey, r(8, 4))
        sub:add(F.total_length, r(12, 4))
    elseif name == "ImmDt" then
        tree:add(F.imm, r)
    elseif name == "METH" then
        local sub = tree:add(r, "METH")
        sub:add(F.msn, r(0, 2))
        sub:add(F.rqmsn, r(2, 2))
    else
        tree:add(F.tx_timestamp, r)
    end
end

local function dissect_data(tvb, tree, opcode, flags, body_end)
    local offset = BTH_LEN
    for _, name in ipairs(data_headers(opcode, bit32.band(flags, FLAG_TIMESTAMP) ~= 0)) do
        local len = header_len[name]
        if offset + len > body_end then return nil end
        add_header(tree, name, tvb(offset, len))
        offset = offset + len
    end
    tree:add(F.payload_length, body_end - offset):set_generated()
    return offset
end

local function dissect_sack(tvb, tree)
    local seth = tree:add(tvb(12, 20), "SETH")
    seth:add(F.sack_offset, tvb(12, 2))
    local sf = seth:add(F.sack_flags, tvb(14, 1))
    sf:add(F.verdict, tvb(14, 1))
    sf:add(F.probe_reply, tvb(14, 1))
    seth:add(F.mpr, tvb(15, 1))
    seth:add(F.bitmap, tvb(16, 8))
    seth:add(F.reflected_ev, tvb(24, 4))
    seth:add(F.reserved, tvb(28, 1))
    seth:add(F.trigger_psn, tvb(29, 3))
    local cc = tree:add(tvb(32, 20), "CC_STATE")
    cc:add(F.ts_echo, tvb(32, 4))
    cc:add(F.service_time_ns, tvb(36, 4))
    cc:add(F.ooo_count, tvb(40, 2))
    cc:add(F.rcv_cwnd_pen, tvb(42, 1))
    cc:add(F.reserved, tvb(43, 1))
    cc:add(F.received_bytes, tvb(44, 8))
end

local function dissect_nack(tvb, tree)
    local neth = tree:add(tvb(12, 16), "NETH")
    neth:add(F.reason, tvb(12, 1))
    neth:add(F.reserved, tvb(13, 3))
    neth:add(F.reflected_ev, tvb(16, 4))
    neth:add(F.reserved, tvb(20, 1))
    neth:add(F.nack_cack_psn, tvb(21, 3))
    neth:add(F.ts_echo, tvb(24, 4))
end

local function dissect_ev_probe(tvb, tree, reply)
    local sub = tree:add(tvb(12, reply and 16 or 12), reply and "EV probe reply" or "EV probe")
    sub:add(F.probed_ev, tvb(12, 4))
    sub:add(F.port, tvb(16, 1))
    if reply then
        sub:add(F.rx_port, tvb(17, 1))
        sub:add(F.reserved, tvb(18, 2))
        sub:add(F.ts_echo, tvb(20, 4))
        sub:add(F.service_time_ns, tvb(24, 4))
    else
        sub:add(F.reserved, tvb(17, 3))
        sub:add(F.tx_timestamp, tvb(20, 4))
    end
end

local function dissect_port_status(tvb, tree)
    local erth = tree:add(tvb(12, 16), "ERTH")
    erth:add(F.ep_op, tvb(12, 1))
    erth:add(F.reserved, tvb(13, 15))
    local eeth = tree:add(tvb(28, 36), "EETH")
    eeth:add(F.port_status, tvb(28, 4))
    eeth:add(F.ports_changed, tvb(32, 4))
    eeth:add(F.port_count, tvb(36, 1))
    eeth:add(F.reserved, tvb(37, 27))
end

-- Fixed body length after the BTH, by control opcode (the reliability probe's depends on TS).
local fixed_body = { [OP.SACK] = 40, [OP.NACK] = 16, [OP.EV_PROBE] = 12, [OP.EV_PROBE_REPLY] = 16,
                     [OP.CNP] = 16, [OP.PORT_STATUS_UPDATE] = 52 }

local function psn_field(opcode)
    if opcode == OP.SACK then return F.cack_psn end
    if opcode == OP.RELIABILITY_PROBE then return F.probe_id end
    if opcode == OP.EV_PROBE or opcode == OP.EV_PROBE_REPLY or
        opcode == OP.PORT_STATUS_UPDATE then return F.req_id end
    return F.psn
end

local function dissect_bth(tvb, tree, opcode, flags)
    local bth = tree:add(tvb(0, BTH_LEN), "BTH")
    bth:add(F.opcode, tvb(0, 1))
    bth:add(F.iba_byte1, tvb(1, 1))
    bth:add(F.pkey, tvb(2, 2))
    bth:add(F.version, tvb(4, 1))
    bth:add(F.dest_qp, tvb(5, 3))
    local ft = bth:add(F.flags, tvb(8, 1))
    for _, f in ipairs({ F.ack_req, F.retx, F.ts, F.trimmed, F.trimmed_lasthop, F.flags_reserved }) do
        ft:add(f, tvb(8, 1))
    end
    bth:add(psn_field(opcode), tvb(9, 3))
end

local function info_line(opcode, flags, tvb)
    local text = string.format("%s QP=0x%06x %s=%d", opcode_names[opcode] or
                               string.format("opcode 0x%02x", opcode), tvb(5, 3):uint(),
                               opcode == OP.SACK and "cPSN" or "PSN", tvb(9, 3):uint())
    if bit32.band(flags, FLAG_TRIMMED) ~= 0 then text = text .. " [TRIMMED]" end
    if bit32.band(flags, FLAG_RETRANSMIT) ~= 0 then text = text .. " [RETX]" end
    if bit32.band(flags, FLAG_ACK_REQUEST) ~= 0 then text = text .. " [ACK_REQ]" end
    return text
end

function mrc.dissector(tvb, pinfo, tree)
    local n = tvb:len()
    if n < BTH_LEN + ICRC_LEN then return 0 end
    local opcode, flags = tvb(0, 1):uint(), tvb(8, 1):uint()
    pinfo.cols.protocol = "MRC"
    pinfo.cols.info = info_line(opcode, flags, tvb)
    local root = tree:add(mrc, tvb(), "MRC, " .. (opcode_names[opcode] or "unknown opcode"))
    add_ev(root)
    add_fabric(root)
    dissect_bth(tvb, root, opcode, flags)
    local body_end = n - ICRC_LEN
    local ok = true
    if opcode >= OP.WRITE_FIRST and opcode <= OP.WRITE_ONLY_WITH_IMM then
        ok = dissect_data(tvb, root, opcode, flags, body_end) ~= nil
    elseif opcode == OP.RELIABILITY_PROBE then
        if bit32.band(flags, FLAG_TIMESTAMP) ~= 0 then
            ok = body_end >= BTH_LEN + TSETH_LEN
            if ok then root:add(F.tx_timestamp, tvb(BTH_LEN, TSETH_LEN)) end
        end
    elseif fixed_body[opcode] ~= nil then
        ok = body_end >= BTH_LEN + fixed_body[opcode]
        if ok then
            if opcode == OP.SACK then dissect_sack(tvb, root)
            elseif opcode == OP.NACK then dissect_nack(tvb, root)
            elseif opcode == OP.CNP then root:add(tvb(BTH_LEN, 16), "CNP: 16 reserved bytes")
            elseif opcode == OP.PORT_STATUS_UPDATE then dissect_port_status(tvb, root)
            else dissect_ev_probe(tvb, root, opcode == OP.EV_PROBE_REPLY) end
        end
    end
    if not ok then root:add_proto_expert_info(ef_short) end
    local icrc = root:add(F.icrc, tvb(body_end, ICRC_LEN))
    local good = crc32(tvb:bytes(0, body_end), body_end) == tvb(body_end, ICRC_LEN):uint()
    icrc:add(F.icrc_good, good):set_generated()
    if not good then icrc:add_proto_expert_info(ef_bad_icrc) end
    return n
end

-- The port: 4791 by default, taken from the stock RoCE dissector; `-o mrc.udp_port:0` gives
-- it back (`--disable-protocol mrc` alone would leave the port to no dissector at all).
--
-- Wireshark's UDP tries the lower of the two ports first, and MRC's source port is the EV
-- id's low 16 bits, so an EV whose source port is, say, 7 would go to the Echo dissector.
-- Every lower port that has a dissector therefore gets a guard: MRC when the destination
-- is MRC's port, else that port's own dissector.
local udp_ports = DissectorTable.get("udp.port")
local stock_handle = udp_ports:get_dissector(UDP_PORT)
local registered_port = 0
local guarded = {}   -- port -> the dissector it had
mrc.prefs.udp_port = Pref.uint("UDP port", UDP_PORT,
                               "UDP port dissected as MRC; 0 leaves 4791 to the stock RoCE dissector")

local guard = Proto("mrc_port_guard", "MRC port guard")

function guard.dissector(tvb, pinfo, tree)
    if registered_port ~= 0 and pinfo.dst_port == registered_port then
        return mrc.dissector(tvb, pinfo, tree)
    end
    local original = guarded[pinfo.match_uint]
    if original ~= nil then return original:call(tvb, pinfo, tree) end
    return 0
end

local function unregister_port()
    if registered_port == 0 then return end
    udp_ports:remove(registered_port, mrc)
    if registered_port == UDP_PORT and stock_handle ~= nil then
        udp_ports:add(UDP_PORT, stock_handle)
    end
    for port, original in pairs(guarded) do udp_ports:add(port, original) end
    guarded = {}
    registered_port = 0
end

local function register_port()
    unregister_port()
    registered_port = mrc.prefs.udp_port
    if registered_port == 0 then return end
    for port = 1, registered_port - 1 do
        local original = udp_ports:get_dissector(port)
        if original ~= nil then
            guarded[port] = original
            udp_ports:add(port, guard)
        end
    end
    udp_ports:add(registered_port, mrc)
end

mrc.prefs_changed = register_port
register_port()
