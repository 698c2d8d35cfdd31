// One minecraft_team sandbox instance: a flying-squid server (offline, superflat, 1.21.4) plus
// a JSON-lines control port for the Python side.
//
//   node server.js --host ADDRESS --port GAME_PORT --world DIR [--idle-exit SECONDS]
//
// Both ports listen on ADDRESS (default 127.0.0.1; the pool gives an address other machines
// reach). The game port speaks the Minecraft protocol (mineflayer bots connect there). The control port
// is written to DIR/../control.json once both listen: {"game_port", "control_port"}. Each control
// request is one JSON line, answered by one JSON line ({"ok": true, ...} or {"ok": false,
// "error": "..."}):
//
//   {"op": "setup", "epoch": E, "gives": [[name, item, count], ...], "blocks": [[x, y, z, block]]}
//       once per epoch (later calls with the same epoch are no-ops): place blocks, give items
//       to players as they join. A lower epoch than the current one is refused (a stale episode).
//   {"op": "blocks", "positions": [[x, y, z], ...]}  -> {"names": [...]}
//   {"op": "players"}  -> {"players": [{"username", "uuid", "position"}]}
//   {"op": "finish", "epoch": E, "agent": A}  -> {"finished": [agents...]}
//   {"op": "finished", "epoch": E}  -> {"finished": [agents...]}
//   {"op": "join_turn", "username": U}, then {"op": "join_done", "username": U}: bots log in one
//       at a time (concurrent logins to flying-squid take many times longer); a turn not given
//       back within 20 s passes to the next bot.
//
// flying-squid prints packet-parser warnings on stdout; this process is a sandbox, so all of
// its output goes to its log file.

const fs = require('fs')
const net = require('net')
const path = require('path')
const { Vec3 } = require('vec3')
const mcServer = require('flying-squid')

function argument (name, fallback) {
  const index = process.argv.indexOf(`--${name}`)
  return index >= 0 ? process.argv[index + 1] : fallback
}

const host = argument('host', '127.0.0.1')
const gamePort = parseInt(argument('port', '25565'), 10)
const worldFolder = path.resolve(argument('world', 'world'))
fs.mkdirSync(worldFolder, { recursive: true })

const serv = mcServer.createMCServer({
  motd: 'rollout minecraft_team',
  port: gamePort,
  host,
  'max-players': 16,
  'online-mode': false,
  logging: false,
  gameMode: 1,
  difficulty: 0,
  worldFolder,
  generation: { name: 'superflat', options: { worldHeight: 80 } },
  kickTimeout: 30000,
  plugins: {},
  modpe: false,
  'view-distance': 4,
  'player-list-text': { header: { text: 'rollout' }, footer: { text: 'minecraft_team' } },
  'everybody-op': true,
  'max-entities': 100,
  version: '1.21.4'
})

const state = { epoch: 0, gives: [], finished: new Set() }
const given = new Set() // `${epoch}:${username}`

serv.on('newPlayer', (player) => {
  // flying-squid spawns players with entity type null: others would see a boat.
  player.entityType = serv.registry.entitiesByName.player.id
  player.on('spawned', () => giveTo(player))
})

function giveTo (player) {
  const key = `${state.epoch}:${player.username}`
  if (given.has(key)) return
  const gives = state.gives.filter(([name]) => name === player.username || name === '*')
  if (gives.length === 0) return
  given.add(key)
  for (const [, item, count] of gives) {
    const itemData = serv.registry.itemsByName[item]
    if (!itemData) continue
    const Item = require('prismarine-item')(serv.registry)
    const slot = player.inventory.firstEmptyInventorySlot()
    if (slot !== null) player.inventory.updateSlot(slot, new Item(itemData.id, count))
  }
}

async function setup (request) {
  if (request.epoch < state.epoch) throw new Error(`stale epoch ${request.epoch} < ${state.epoch}`)
  if (request.epoch === state.epoch) return { epoch: state.epoch, fresh: false }
  state.epoch = request.epoch
  state.gives = request.gives || []
  state.finished = new Set()
  for (const [x, y, z, block] of request.blocks || []) {
    const data = serv.registry.blocksByName[block]
    if (!data) throw new Error(`unknown block ${block}`)
    await serv.setBlock(serv.overworld, new Vec3(x, y, z), data.defaultState ?? data.minStateId)
  }
  for (const player of serv.players) giveTo(player)
  return { epoch: state.epoch, fresh: true }
}

let joinChain = Promise.resolve()
const joinRelease = new Map()

function joinTurn (username) {
  const previous = joinChain
  let release
  const mine = new Promise((resolve) => { release = resolve })
  joinChain = previous.then(() => mine)
  return previous.then(() => {
    joinRelease.set(username, release)
    setTimeout(release, 20000)
    return {}
  })
}

// An instance with no players and no control request for this long was left behind: exit.
const idleExit = parseFloat(argument('idle-exit', '900')) * 1000
let lastActivity = Date.now()
setInterval(() => {
  if (serv.players && serv.players.length > 0) lastActivity = Date.now()
  if (Date.now() - lastActivity > idleExit) process.exit(0)
}, 10000).unref()

async function handle (request) {
  lastActivity = Date.now()
  switch (request.op) {
    case 'join_turn':
      return await joinTurn(String(request.username))
    case 'join_done': {
      const release = joinRelease.get(String(request.username))
      joinRelease.delete(String(request.username))
      if (release) release()
      return {}
    }
    case 'setup':
      return await setup(request)
    case 'blocks': {
      const names = []
      for (const [x, y, z] of request.positions) {
        const block = await serv.overworld.getBlock(new Vec3(x, y, z))
        names.push(block ? block.name : 'air')
      }
      return { names }
    }
    case 'players':
      return {
        players: serv.players.map((p) => ({
          username: p.username,
          uuid: p.uuid,
          position: [p.position.x, p.position.y, p.position.z]
        }))
      }
    case 'finish':
      if (request.epoch !== state.epoch) throw new Error(`epoch ${request.epoch} is not current`)
      state.finished.add(request.agent)
      return { finished: [...state.finished].sort() }
    case 'finished':
      if (request.epoch !== state.epoch) throw new Error(`epoch ${request.epoch} is not current`)
      return { finished: [...state.finished].sort() }
    case 'ping':
      return { epoch: state.epoch }
    default:
      throw new Error(`unknown op ${JSON.stringify(request.op)}`)
  }
}

const control = net.createServer((socket) => {
  let buffer = ''
  socket.setEncoding('utf8')
  socket.on('error', () => {})
  socket.on('data', (chunk) => {
    buffer += chunk
    let newline
    while ((newline = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, newline)
      buffer = buffer.slice(newline + 1)
      if (!line.trim()) continue
      let request
      try {
        request = JSON.parse(line)
      } catch (error) {
        socket.write(JSON.stringify({ ok: false, error: `bad JSON: ${error.message}` }) + '\n')
        continue
      }
      handle(request).then(
        (result) => socket.write(JSON.stringify({ ok: true, ...result }) + '\n'),
        (error) => socket.write(JSON.stringify({ ok: false, error: String(error.message || error) }) + '\n')
      )
    }
  })
})

// Python may talk once the game port listens and every plugin is loaded (setBlock, commands).
// (flying-squid's own 'ready' event gives up after 5 s, too soon on a busy machine.)
function whenPluginsReady (then) {
  if (serv.pluginsReady) then()
  else setTimeout(() => whenPluginsReady(then), 50)
}

serv.on('listening', () => whenPluginsReady(() => {
  control.listen(0, host, () => {
    const info = { game_port: gamePort, control_port: control.address().port }
    const file = path.join(path.dirname(worldFolder), 'control.json')
    fs.writeFileSync(file + '.tmp', JSON.stringify(info))
    fs.renameSync(file + '.tmp', file)
    console.error(`minecraft_team server ready: ${JSON.stringify(info)}`)
  })
}))

process.on('SIGTERM', () => {
  try { serv.quit() } catch (error) {}
  setTimeout(() => process.exit(0), 200)
})
