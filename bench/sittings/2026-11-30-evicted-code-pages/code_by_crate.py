# Which crates fill the code pages a running replica has mapped; see code-by-crate.txt.
# Usage: nm -n -S -C <binary> | awk '$3 ~ /^[tT]$/' > /tmp/syms-n.txt; python3 code_by_crate.py <pid> (as root, for pagemap).
# Assumes the code segment is mapped at file offset + 0x1000, as readelf -l showed for this build.
import sys,struct,re,collections,bisect,pickle,os
pid=int(sys.argv[1]); exe=os.readlink(f'/proc/{pid}/exe')
syms=[]
for line in open('/tmp/syms-n.txt'):
    p=line.rstrip('\n').split(' ',3)
    if len(p)<4: continue
    a=int(p[0],16); sz=int(p[1],16); name=p[3]
    n=re.sub(r'^[<&]+','',name); n=re.sub(r'^(impl |dyn |mut )+','',n)
    m=re.match(r'([A-Za-z_][A-Za-z0-9_]*)',n)
    syms.append((a,sz,m.group(1) if m else '?'))
syms.sort(); starts=[s[0] for s in syms]
present=set()
for l in open(f'/proc/{pid}/maps'):
    f=l.split()
    if len(f)<6 or f[5]!=exe or 'x' not in f[1]: continue
    a,b=[int(x,16) for x in f[0].split('-')]; off=int(f[2],16)
    pm=open(f'/proc/{pid}/pagemap','rb'); pm.seek(a//4096*8); d=pm.read((b-a)//4096*8)
    for i in range(0,len(d),8):
        if struct.unpack('<Q',d[i:i+8])[0]>>63:
            present.add(a+i//8*4096 - a + off + 0x1000)  # vaddr of page
by=collections.Counter(); tot=collections.Counter()
for (a,sz,c) in syms:
    tot[c]+=sz
    # bytes of symbol in present pages
    p0=a//4096*4096; got=0
    x=a
    while x<a+sz:
        pg=x//4096*4096; end=min(a+sz,pg+4096)
        if pg in present: got+=end-x
        x=end
    by[c]+=got
print('present pages MiB', len(present)*4096/2**20, 'symbol bytes in them', sum(by.values())/2**20)
cold=['openstack_sdk_core','openstack_sdk','openstack_sdk_auth_core','openstack_types','reqwest','config','annotate_snippets','serde_saphyr','granit_parser','yaml_rust2','schemars','aho_corasick','regex_automata','regex_syntax','regex','clap_builder','clap_lex','clap','netlink_packet_route','netlink_packet_core','netlink_proto','netlink_sys','rtnetlink','pest','jsonpath_rust','rcgen','x509_parser','ring']
print('cold crates', ', '.join(cold), 'KiB mapped', sum(by[c] for c in cold)//1024)
for c,v in by.most_common(): print(f"{c:40} {v/1024:8.0f} KiB of {tot[c]/1024:8.0f}")
